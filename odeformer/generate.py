"""Text generation for :class:`~odeformer.CausalLM`, with a key/value cache that is exact under every fixed-step scheme.

    tokens = model.generate(prompt, max_new_tokens=200, temperature=0.8, top_k=40)  # (B, P + 200)

Why a cache works for any scheme here
-------------------------------------
A transformer's key/value cache rests on one fact: the features of position ``i`` depend on positions ``j <= i`` only,
and a new position changes nothing before it. In this library a layer is one step of a scheme on its fields, and
every scheme here is *causal token by token*: everything it does besides evaluating attention acts on each token by
itself (the FFN and its chain rule, LayerNorm, the axpy updates, the gates, a two-step scheme's history), and the
attention field is causal. So stepping only the new positions through the layers, with attention fields that read the
earlier positions' keys and values from a cache, computes exactly what the whole sequence would.

The one subtlety is that a layer may evaluate attention several times per step, each time at another state: Heun and
Verlet twice, RK4 four times, the Strang and mixed layers as their schemes do, a fixed-grid continuous solver at every
stage of every step. Each evaluation has its own keys and values, so the cache holds one slot per *evaluation*, per
layer, indexed by its order within the layer's step: the ``k``-th evaluation of layer ``l`` for a new token appends
to, and attends over, what the ``k``-th evaluations of layer ``l`` left for the earlier tokens. A two-step scheme's
history (heavy ball's previous position, leapfrog's previous force) is per token and flows from layer to layer within
one pass, so it needs no cache.

What is checked rather than trusted, since a scheme of a user's may break the assumption:

- the number and order of evaluations: each pass must evaluate every layer's attention as often, and at the same
  times, as the prompt's pass did; a scheme whose evaluations depend on the state is a one-line error (recompute with
  ``cache=False``);
- causality token by token: the first cached token's logits are compared with a recomputation of the whole sequence
  (once per model and schedule); a scheme that mixes tokens outside attention (a mean over the sequence, say) is a
  one-line error.

What a token's pass costs
-------------------------
At batch 1 a new token's pass is a few dozen small kernels a layer, so the Python around them counts as much as they
do. :func:`generate` makes a *binding* cache (``KVCache(bind=True)``): on its first pass the model, the backbone and
each layer read their weights once into plain functions (:meth:`~odeformer.fields.AttentionField.bind_cache`,
:meth:`~odeformer.fields.FeedForward.bind`, :meth:`~odeformer.layer.Layer.bind_cache`), and every later pass steps
the layers' schemes on those instead of calling the fields, their norms and projections as modules. They run the same
operations in the same order, so the logits are those of the module path to the bit (tested under every scheme and
layout). Before each pass a check gathered once per cache (:func:`~odeformer.hooks.direct_calls`) sends the pass
through the modules instead where that would differ: a hook on one of them or registered globally, a module in
training mode, autograd or forward-mode AD on, a substep count or an observer on the backbone.

Continuous depth with an adaptive solver cannot reuse a cache (its step sizes depend on every token's error), so
:func:`generate` recomputes the sequence for every token there, and warns once; torchdiffeq's fixed-grid ``rk4``
evaluates in a fixed order and caches like a discrete stack. Past ``max_len`` the context is the last ``max_len``
tokens (as nanoGPT's ``generate`` crops it), and since every position then moves, each further token is recomputed.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn


class CacheError(ValueError):
    """A layer whose scheme cannot reuse a key/value cache (said in one line, with the way out)."""


class LayerCache:
    """One layer's keys and values: one slot per attention evaluation in the layer's step, in the scheme's order.

    The prompt's pass creates the slots (``capacity`` positions each); every later pass must evaluate the attention
    as many times, at the same times ``t``, appending ``n`` new positions to each slot.
    """

    def __init__(self, index: int, capacity: int, label: str = ""):
        self.index, self.capacity, self.label = index, capacity, label
        self.keys: list[Tensor] = []  # each (B, H, capacity, Dh)
        self.values: list[Tensor] = []
        self.times: list[Any] = []
        self.length = 0  # positions held
        self.calls = 0  # evaluations in the current pass
        self.new = 0  # positions the current pass adds

    def begin(self, new: int) -> None:
        if self.length + new > self.capacity:
            raise CacheError(
                f"the cache holds {self.capacity} positions; {self.length} are used and {new} more were given."
            )
        self.calls, self.new = 0, new

    def extend(self, t: Any, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this evaluation's keys and values ``(B, H, n, Dh)``; return the slot's, ``(B, H, P + n, Dh)``."""
        i, start, n = self.calls, self.length, k.shape[-2]
        self.calls = i + 1
        if n != self.new:
            raise CacheError(
                f"layer {self.index}{self.label} evaluated attention on {n} positions where the pass has {self.new} "
                "new ones: its scheme does not step tokens one by one, so a cache cannot stand for the earlier "
                "positions; generate(..., cache=False) recomputes them."
            )
        if i < len(self.keys):
            if not _same_time(self.times[i], t):
                raise self._varies(
                    f"its evaluation {i + 1} at t={_time(t)} for a new position, at t={self.times[i]} first"
                )
        elif start == 0 and i == len(self.keys):  # the prompt's pass: a new slot
            B, H, _, Dh = k.shape
            self.keys.append(k.new_empty(B, H, self.capacity, Dh))
            self.values.append(v.new_empty(B, H, self.capacity, Dh))
            self.times.append(_time(t))
        else:
            raise self._varies(f"{i + 1} or more times for a new position but {len(self.keys)} times for the prompt")
        keys, values = self.keys[i], self.values[i]
        keys.narrow(2, start, n).copy_(k)  # in place: no slicing through __setitem__, no growing cat
        values.narrow(2, start, n).copy_(v)
        return keys.narrow(2, 0, start + n), values.narrow(2, 0, start + n)

    def end(self) -> None:
        if self.calls != len(self.keys):
            raise self._varies(f"{self.calls} times for a new position but {len(self.keys)} times for the prompt")
        self.length += self.new

    def _varies(self, what: str) -> CacheError:
        return CacheError(
            f"layer {self.index}{self.label} evaluated its attention {what}: its scheme's evaluations depend on the "
            "state, so the cache's slots do not line up; generate(..., cache=False) recomputes every token."
        )


def _time(t: Any) -> Any:
    return float(t) if isinstance(t, numbers.Real) else t


def _same_time(first: Any, t: Any) -> bool:
    if type(t) is float and type(first) is float:  # the common case, without the ABC checks (per evaluation)
        return first == t
    if isinstance(t, numbers.Real) and isinstance(first, float):
        return first == float(t)
    return True  # a tensor time (continuous depth) is not read back from the device


class KVCache:
    """The key/value cache of a causal backbone: one :class:`LayerCache` per layer (one for a continuous backbone,
    whose single field serves every step). Pass it to ``CausalLM(tokens, cache=...)`` with the prompt, then with each
    new token: the model sees only the new positions and returns their logits.

    ``bind=True`` (what :func:`generate` makes) lets the backbone read its fields' weights once, on the cache's first
    pass, and step later passes on them without the per-layer module calls (``bound`` holds what it read): the same
    operations and the same results, to the bit; a module or parameter *replaced* after the first pass (rather than
    updated in place, as ``load_state_dict`` or an optimiser does) is not seen, so build a new cache then. A pass
    with a hook on a module, a module in training mode, or autograd on takes the module path all the same."""

    def __init__(self, layers: int, capacity: int, labels: Sequence[str] | None = None, *, bind: bool = False):
        labels = labels or [""] * layers
        self.layers = [LayerCache(i, capacity, labels[i]) for i in range(layers)]
        self.capacity = capacity
        self.bound: dict[nn.Module, Any] | None = {} if bind else None

    @property
    def length(self) -> int:
        """Positions held (the next position's index)."""
        return self.layers[0].length

    def begin(self, new: int) -> None:
        for layer in self.layers:
            layer.begin(new)

    def end(self) -> None:
        for layer in self.layers:
            layer.end()

    def slots(self) -> list[int]:
        """Attention evaluations cached per layer (one slot each)."""
        return [len(layer.keys) for layer in self.layers]


def new_cache(model: nn.Module, capacity: int | None = None, *, bind: bool = False) -> KVCache:
    """An empty :class:`KVCache` for ``model`` (a ``CausalLM``) holding ``capacity`` positions (default ``max_len``);
    ``bind`` as in :class:`KVCache`."""
    backbone = model.backbone
    layers = list(getattr(backbone, "layers", []))
    capacity = model.max_len if capacity is None else capacity
    if not layers:  # continuous depth: one field
        return KVCache(1, capacity, [f" ({backbone.solver.name})"], bind=bind)
    return KVCache(len(layers), capacity, [f" ({layer.block_stepper!r})" for layer in layers], bind=bind)


def cacheable(model: nn.Module) -> bool:
    """Whether ``model``'s backbone can step new positions with a cache: every discrete one, and a continuous one on
    torchdiffeq's fixed grid; not an adaptive solver (its steps depend on every token)."""
    chosen = getattr(model.backbone, "solver", None)  # a continuous backbone's solver; a discrete one has layers
    return chosen is None or (chosen.library == "torchdiffeq" and chosen.method == "rk4" and not chosen.adjoint)


def _prompt(prompt: Any, padding_mask: Tensor | None, device: torch.device) -> Tensor:
    """The prompts as a ``(B, P)`` int64 tensor; prompts of different lengths, or a mask with padding, are refused."""
    refuse = (
        "CausalLM takes no padding mask, so a left-padded prompt would attend to its padding and its tokens would "
        "sit at other positions; generate prompts of each length separately"
    )
    if not isinstance(prompt, Tensor):
        rows = [list(row) if isinstance(row, (list, tuple, Tensor)) else None for row in prompt]
        if any(row is None for row in rows):
            rows = [list(prompt)]
        lengths = sorted({len(row) for row in rows})
        if len(lengths) > 1:
            raise ValueError(f"generate takes prompts of one length, got lengths {lengths}: {refuse}.")
        prompt = torch.tensor(rows, dtype=torch.long)
    if prompt.dim() == 1:
        prompt = prompt[None]
    if prompt.dim() != 2 or prompt.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"prompt_tokens must be integer tokens of shape (B, P), got {tuple(prompt.shape)} {prompt.dtype}."
        )
    if prompt.shape[1] == 0:
        raise ValueError("generate needs at least one prompt token.")
    if padding_mask is not None:
        if padding_mask.shape != prompt.shape:
            raise ValueError(
                f"padding_mask must have the prompts' shape {tuple(prompt.shape)}, got {tuple(padding_mask.shape)}."
            )
        if not bool(padding_mask.bool().all()):
            raise ValueError(f"generate was given prompts with padding: {refuse}.")
    return prompt.to(device=device, dtype=torch.long)


def _check_sampling(max_new_tokens: Any, temperature: Any, top_k: Any, generator: Any) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}.")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not (math.isfinite(temperature) and temperature >= 0)
    ):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}.")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}.")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}.")


def pick(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, generator=None) -> Tensor:
    """The next token ``(B,)`` from logits ``(B, V)``: the argmax at ``temperature=0``, else a draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest (ties at the k-th value kept)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


def generate(
    model: nn.Module,
    prompt_tokens: Any,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    *,
    cache: bool = True,
    padding_mask: Tensor | None = None,
    return_logits: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The prompts ``(B, P)`` followed by ``max_new_tokens`` tokens: ``(B, P + max_new_tokens)`` (a 1-D prompt gives
    a 1-D result). It is :meth:`odeformer.CausalLM.generate`: ``model.generate(prompt_tokens, max_new_tokens, ...)``.

    ``temperature=0`` is greedy (the argmax); otherwise each token is drawn from ``softmax(logits / temperature)``
    over the ``top_k`` most likely (all when ``None``), with ``generator`` if given. Prompts are of one length
    (``CausalLM`` takes no padding mask: a list of prompts of several lengths, or a ``padding_mask`` with padding, is
    a one-line error). A new token costs one pass of its position through the layers: each layer keeps the keys and
    values of every attention evaluation of its step (``cache=False`` recomputes the sequence instead; an adaptive
    continuous solver always does, and warns). Past ``max_len`` the context is the last ``max_len`` tokens,
    recomputed for each token. ``return_logits=True`` also returns the logits each new token was chosen from,
    ``(B, max_new_tokens, vocab_size)``. Runs in eval mode under ``torch.inference_mode`` (what it returns are
    ordinary tensors), and leaves the mode as it was.
    """
    _check_sampling(max_new_tokens, temperature, top_k, generator)
    device = next(model.parameters()).device
    flat = isinstance(prompt_tokens, Tensor) and prompt_tokens.dim() == 1
    tokens = _prompt(prompt_tokens, padding_mask, device)
    if tokens.shape[1] > model.max_len:
        raise ValueError(f"the prompt has {tokens.shape[1]} tokens, more than the model's max_len={model.max_len}.")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= model.vocab_size):
        raise ValueError(f"token ids must lie in [0, {model.vocab_size}), got [{tokens.min()}, {tokens.max()}].")
    if cache and not cacheable(model):
        warnings.warn(
            f"generate: continuous depth with the adaptive solver {model.backbone.solver.name!r} chooses its steps "
            "from every token, so a cache cannot stand for the earlier positions; every token recomputes the "
            "sequence (a fixed-grid solver such as rk4_grid caches).",
            stacklevel=2,
        )
        cache = False
    training = model.training
    model.eval()
    try:
        # Inference mode rather than no_grad: no version counters or view tracking on the hundreds of small tensors a
        # token's pass makes (a sixth of a batch-1 token's time at GPT-2's benchmark size).
        with torch.inference_mode():
            out, logits = _run(model, tokens, max_new_tokens, temperature, top_k, generator, cache)
    finally:
        model.train(training)
    out, logits = out.clone(), logits.clone()  # ordinary tensors: a caller may train on what was generated
    if flat:
        out, logits = out[0], logits[0]
    return (out, logits) if return_logits else out


def _run(model, tokens, max_new_tokens, temperature, top_k, generator, use_cache):
    B, P = tokens.shape
    limit = model.max_len
    kv = new_cache(model, min(limit, P + max_new_tokens), bind=True) if use_cache and max_new_tokens else None
    seen: list[Tensor] = []
    out = torch.cat([tokens, tokens.new_empty(B, max_new_tokens)], dim=1)  # filled in place, token by token
    logits = None
    for i in range(max_new_tokens):
        n = P + i  # the tokens so far: out[:, :n]
        if i == 0:
            logits = (model(tokens, cache=kv) if kv is not None else model(tokens))[:, -1]
        elif kv is not None and kv.length < limit:
            logits = model(out.narrow(1, n - 1, 1), cache=kv)[:, -1]
            if i == 1:
                _check_causal(model, out[:, :n], logits)
        else:  # no cache, or past max_len: the last max_len tokens, recomputed
            logits = model(out[:, max(0, n - limit) : n])[:, -1]
        seen.append(logits)
        out.select(1, n).copy_(pick(logits, temperature, top_k, generator))
    vocab = model.vocab_size
    stacked = torch.stack(seen, dim=1) if seen else tokens.new_empty(B, 0, vocab, dtype=torch.get_default_dtype())
    return out, stacked


def _signature(model: nn.Module) -> tuple:
    layers = getattr(model.backbone, "layers", [])
    return tuple((type(layer.block_stepper), repr(layer.block_stepper), type(layer.stepper)) for layer in layers)


def _check_causal(model: nn.Module, sequence: Tensor, cached: Tensor) -> None:
    """Compare the first cached token's logits with a recomputation of the whole sequence (once per model and
    schedule): a scheme that mixes tokens outside attention is a one-line error instead of wrong text."""
    signature = _signature(model)
    if getattr(model, "_generate_checked", None) == signature:
        return
    full = model(sequence)[:, -1]
    if not bool(torch.isfinite(full).all()):  # a diverged model: nothing to compare
        return
    scale = 1.0 + float(full.abs().max())
    gap = float((cached - full).abs().max())
    if not gap <= torch.finfo(full.dtype).eps ** 0.5 * scale:
        layers = getattr(model.backbone, "layers", [])
        schemes = sorted({type(layer.stepper).__name__ for layer in layers}) or [model.backbone.solver.name]
        raise CacheError(
            f"cached generation differs from recomputation by {gap:.2e} (logits up to {scale - 1:.2e}): the scheme "
            f"{', '.join(schemes)} is not causal token by token (it mixes tokens outside attention, or its state "
            "depends on the sequence), so a cache cannot stand for the earlier positions; generate(..., cache=False) "
            "recomputes every token."
        )
    model._generate_checked = signature


def sample_text(
    model: nn.Module,
    itos: Sequence[str],
    prompt: str,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> str:
    """``prompt`` continued by ``max_new_tokens`` characters of a character-level model whose vocabulary is ``itos``;
    a character not in it is a one-line error."""
    stoi = {ch: i for i, ch in enumerate(itos)}
    unknown = sorted({ch for ch in prompt if ch not in stoi})
    if unknown:
        raise ValueError(
            f"the prompt has characters the model's vocabulary lacks: {', '.join(map(repr, unknown))} "
            f"(it has {len(itos)}: {''.join(itos)!r})."
        )
    if not prompt:
        raise ValueError("the prompt is empty: give at least one character.")
    tokens = torch.tensor([stoi[ch] for ch in prompt], dtype=torch.long)
    out = generate(model, tokens, max_new_tokens, temperature, top_k, generator)
    return "".join(itos[i] for i in out.tolist())


__all__ = ["CacheError", "KVCache", "LayerCache", "cacheable", "generate", "new_cache", "pick", "sample_text"]
