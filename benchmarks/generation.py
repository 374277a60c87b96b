"""Text generation speed: ``CausalLM.generate`` with its key/value cache against recomputing the sequence for every
token, and against Hugging Face GPT-2's own cached ``generate`` of the same weights (the ``from_hf`` copy under
``diffusion``; greedy, the same tokens), with Full Wave (the same weights integrated as a wave) beside it, and the
same generation written out by hand on GPT-2's weights (:func:`handwritten_calls`), cached and recomputed, whose ratio
is reported beside the cache's own as the ceiling at this size.

At batch 1 and GPT-2's benchmark shape a token's pass is nearly all per-operation overhead (about 30 small kernels a
layer), while a recomputed pass over ~150 tokens is a few real matrix products; so even the hand-written loop, with
nothing but the kernels, gains only 5× to 9× from its cache here, depending on the machine's load. The library's
cached pass makes the same kernels; what it adds is Python per layer: the scheme's step and split (``solvers``),
the cache's bookkeeping, and the fields, which ``generate`` binds once per call (their weights read into closures,
``KVCache(bind=True)``) instead of calling them as modules on every token. ``generate_vs_handwritten_time`` is that
overhead as a ratio, the cached generation's time over the hand-written cached loop's; the cache's gain grows with
the batch (``--batch 8``) and the model.

    python -m benchmarks.generation [--rounds 3] [--tokens 256] [--threads 1] [--batch 1]

:func:`generation_rounds` is what ``python -m benchmarks.run`` (``make bench``) calls; each call generates
``tokens`` new tokens after a prompt of ``GEN["prompt"]``; the ratios are medians over interleaved rounds of the
ratio within each round.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch

import odeformer
from benchmarks.timing import cpu_threads, interleaved_samples, median, paired_median

GEN = dict(dim=128, depth=6, heads=4, vocab=65, batch=1, prompt=16, new=256, threads=1)
"""Generation sizes: GPT-2 of the benchmark's language-model shape, one prompt of 16 tokens, 256 new tokens; on the
CPU one thread for every model alike (a batch-1 token's products are too small to split, and on a shared machine a
second thread mostly waits: here 5.5 ms a token with one thread, 9 to 100 ms with two while other jobs ran)."""


def _models(tokens: int, device: str) -> dict[str, torch.nn.Module]:
    """The from_hf copies of one GPT-2 under diffusion and full_wave, and the GPT-2 itself (when transformers is
    installed; else a CausalLM of the same shape)."""
    from benchmarks.anchors import have_transformers, hf_gpt2

    positions = GEN["prompt"] + tokens
    torch.manual_seed(0)
    if have_transformers():
        gpt2 = hf_gpt2(GEN["vocab"], positions, GEN["depth"], GEN["dim"], GEN["heads"]).model.to(device).eval()
        return {
            "gpt2": gpt2,
            "diffusion": odeformer.from_hf(gpt2).eval(),
            "full_wave": odeformer.from_hf(gpt2, solver="full_wave").eval(),
        }
    shape = dict(depth=GEN["depth"], dim=GEN["dim"], heads=GEN["heads"])
    diffusion = odeformer.CausalLM(GEN["vocab"], positions, solver="diffusion", **shape).to(device).eval()
    wave = odeformer.CausalLM(GEN["vocab"], positions, solver="full_wave", **shape).to(device)
    wave.load_state_dict(diffusion.state_dict())
    return {"diffusion": diffusion, "full_wave": wave.eval()}


def generation_calls(tokens: int, device: str) -> dict[str, Callable[[], torch.Tensor]]:
    """One greedy generation of ``tokens`` tokens per configuration: ``cached`` and ``recompute`` (the diffusion
    copy with and without its cache), ``full_wave`` (cached), ``gpt2`` (transformers' generate, its cache on) and the
    hand-written loop's two (:func:`handwritten_calls`)."""
    models = _models(tokens, device)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, GEN["vocab"], (GEN["batch"], GEN["prompt"]), generator=g).to(device)
    diffusion, wave = models["diffusion"], models["full_wave"]
    calls = {
        "cached": lambda: diffusion.generate(prompt, tokens, temperature=0.0),
        "full_wave": lambda: wave.generate(prompt, tokens, temperature=0.0),
        "recompute": lambda: diffusion.generate(prompt, tokens, temperature=0.0, cache=False),
    }
    if "gpt2" in models:
        gpt2, mask = models["gpt2"], torch.ones_like(prompt)

        @torch.no_grad()
        def hf():
            return gpt2.generate(
                prompt,
                attention_mask=mask,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                use_cache=True,
                pad_token_id=0,
                eos_token_id=None,
            )

        handwritten = handwritten_calls(gpt2, prompt, tokens)
        # the cached generations run next to each other in every round (the rounds rotate this order), so that the
        # ratios between them see the same moment of a loaded machine
        calls = {"handwritten_cached": handwritten["handwritten_cached"], **calls, "gpt2": hf}
        calls["handwritten_recompute"] = handwritten["handwritten_recompute"]
    return calls


def handwritten_calls(
    gpt2: torch.nn.Module, prompt: torch.Tensor, tokens: int
) -> dict[str, Callable[[], torch.Tensor]]:
    """The same greedy generation written out by hand on GPT-2's weights in eager PyTorch, with a preallocated cache
    (``handwritten_cached``) and recomputing (``handwritten_recompute``): the fewest operations a pass can make, so
    their ratio is what a cache can gain at this size with per-operation overhead cut to the bone."""
    body = gpt2.transformer
    heads = body.config.n_head
    layers = [
        (b.ln_1, b.attn.c_attn.weight.t(), b.attn.c_attn.bias, b.attn.c_proj.weight.t(), b.attn.c_proj.bias, b.ln_2,
         b.mlp.c_fc.weight.t(), b.mlp.c_fc.bias, b.mlp.c_proj.weight.t(), b.mlp.c_proj.bias)
        for b in body.h
    ]  # fmt: skip
    F = torch.nn.functional

    def logits(ids, start=0, caches=None):
        B, n = ids.shape
        x = body.wte.weight[ids] + body.wpe.weight[start : start + n]
        for (ln1, wa, ba, wo, bo, ln2, w1, b1, w2, b2), kv in zip(layers, caches or [None] * len(layers)):
            q, k, v = F.linear(ln1(x), wa, ba).view(B, n, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
            if kv is not None:
                kv[0].narrow(2, start, n).copy_(k)
                kv[1].narrow(2, start, n).copy_(v)
                k, v = kv[0].narrow(2, 0, start + n), kv[1].narrow(2, 0, start + n)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None)
            x = x + F.linear(a.transpose(1, 2).reshape(B, n, -1), wo, bo)
            x = x + F.linear(F.gelu(F.linear(ln2(x), w1, b1), approximate="tanh"), w2, b2)
        return F.linear(body.ln_f(x[:, -1]), body.wte.weight)

    @torch.inference_mode()
    def cached():
        B, P = prompt.shape
        out = torch.cat([prompt, prompt.new_empty(B, tokens)], dim=1)
        shape = (B, heads, P + tokens, body.config.n_embd // heads)
        caches = [(body.wte.weight.new_empty(shape), body.wte.weight.new_empty(shape)) for _ in layers]
        last = logits(prompt, 0, caches)
        for i in range(tokens):
            out[:, P + i] = last.argmax(-1)
            if i + 1 < tokens:
                last = logits(out[:, P + i : P + i + 1], P + i, caches)
        return out.clone()

    @torch.inference_mode()
    def recompute():
        out = prompt
        for _ in range(tokens):
            out = torch.cat([out, logits(out).argmax(-1, keepdim=True)], dim=1)
        return out.clone()

    return {"handwritten_cached": cached, "handwritten_recompute": recompute}


def agreement(outputs: dict[str, torch.Tensor]) -> dict[str, bool]:
    """Whether the generations made the same tokens: cached with recomputed, and the diffusion copy with GPT-2."""
    agree = {"cached_equals_recompute": bool(torch.equal(outputs["cached"], outputs["recompute"]))}
    if "gpt2" in outputs:
        agree["cached_equals_gpt2"] = bool(torch.equal(outputs["cached"], outputs["gpt2"]))
    if "handwritten_cached" in outputs:
        agree["cached_equals_handwritten"] = all(
            torch.equal(outputs["cached"], outputs[f"handwritten_{kind}"]) for kind in ("cached", "recompute")
        )
    return agree


def generation_times(
    rounds: int, device: str, tokens: int = GEN["new"], threads: int = GEN["threads"]
) -> tuple[dict[str, float], dict[str, bool]]:
    """Median seconds of each generation in :func:`generation_calls` over :func:`generation_rounds`, and whether
    their outputs agree."""
    samples, agree = generation_rounds(rounds, device, tokens, threads)
    return medians(samples), agree


def generation_rounds(
    rounds: int, device: str, tokens: int = GEN["new"], threads: int = GEN["threads"]
) -> tuple[dict[str, list[float]], dict[str, bool]]:
    """Seconds of each generation in :func:`generation_calls`, one per round: every round runs each generation once,
    in an order rotated round by round (no warm-up round: one generation is hundreds of passes); and whether their
    outputs agree. On the CPU torch runs ``threads`` threads meanwhile (0: its default)."""
    with cpu_threads(device, threads):
        return _generation_rounds(rounds, device, tokens)


def _generation_rounds(rounds: int, device: str, tokens: int) -> tuple[dict[str, list[float]], dict[str, bool]]:
    outputs: dict[str, torch.Tensor] = {}

    def kept(name: str, call: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            outputs[name] = call()

        return run

    calls = {name: kept(name, call) for name, call in generation_calls(tokens, device).items()}
    return interleaved_samples(calls, rounds, warmup=0, device=device), agreement(outputs)


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: median(values) for name, values in samples.items()}


def ratios(times: dict[str, float], samples: dict[str, list[float]] | None = None) -> dict[str, float]:
    """The reported measures: with ``samples`` (per round, :func:`generation_rounds`), each the median over the
    rounds of the ratio within a round (both generations timed at the same moment of a loaded machine), else the
    ratio of the medians ``times``."""

    def ratio(a: str, b: str) -> float:
        if samples is None:
            return times[a] / times[b]
        return paired_median(samples[a], samples[b])

    out = {
        "generate_cache_speedup": ratio("recompute", "cached"),
        "generate_full_vs_diffusion_time": ratio("full_wave", "cached"),
    }
    if "gpt2" in times:
        out["generate_vs_gpt2_time"] = ratio("cached", "gpt2")
    if "handwritten_cached" in times:
        out["generate_vs_handwritten_time"] = ratio("cached", "handwritten_cached")
        # the ceiling of the cache's gain at this size, beside its goal (raw: not a goal of its own)
        out["handwritten_cache_speedup"] = ratio("handwritten_recompute", "handwritten_cached")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generation", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=GEN["new"])
    parser.add_argument("--threads", type=int, default=GEN["threads"], help="CPU threads (0: torch's default)")
    parser.add_argument("--batch", type=int, default=GEN["batch"], help="prompts generated together")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    GEN["batch"] = args.batch
    samples, agree = generation_rounds(args.rounds, args.device, args.tokens, args.threads)
    times, threads = medians(samples), args.threads or torch.get_num_threads()
    print(
        json.dumps(
            {**ratios(times, samples), "seconds": times, **agree, "threads": threads, "batch": args.batch}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
