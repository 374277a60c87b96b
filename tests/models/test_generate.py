"""``CausalLM.generate``: a key/value cache per layer and per attention evaluation, exact under every fixed-step
scheme (float64, against recomputing the whole sequence), the errors for schemes it cannot serve, sampling, and
Hugging Face GPT-2's own cached generation as the anchor."""

import sys
import textwrap
import warnings

import pytest
import torch

import odeformer
import solvers
from odeformer.continuous import continuous
from odeformer.fields import AttentionField
from odeformer.generate import CacheError, new_cache, pick
from odeformer.registry import solver

VOCAB, MAX_LEN, PROMPT, NEW = 13, 16, 3, 6


def _lm(solver, seed=0, **options):
    torch.manual_seed(seed)
    return odeformer.CausalLM(VOCAB, MAX_LEN, depth=3, dim=8, heads=2, solver=solver, **options).double()


def _prompt(batch=2, length=PROMPT, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _cached_equals_recomputed(model, prompt=None, new=NEW):
    """Every position's logits through the cache equal one forward of the whole sequence, to 1e-10: the prompt's
    positions (its pass) and each of ``new`` tokens drawn one at a time (each pass reading what the earlier ones left
    in every slot). The rows' prompts differ and their tokens are drawn (not argmaxed), so the rows' samples differ
    and a cache that mixed up rows or positions shows. ``generate`` with the same draws makes the same tokens from the
    same logits."""
    prompt = _prompt() if prompt is None else prompt
    P = prompt.shape[1]
    model.eval()
    cache, g = new_cache(model), torch.Generator().manual_seed(2)
    with torch.no_grad():
        passes, sequence = [model(prompt, cache=cache)], prompt
        for _ in range(new):
            token = pick(passes[-1][:, -1], 1.0, None, g)[:, None]
            sequence = torch.cat([sequence, token], dim=1)
            passes.append(model(token, cache=cache))
        full = model(sequence)
    cached = torch.cat(passes, dim=1)  # (B, P + new, V): the logits at every position, as the cache gave them
    assert cached.shape == full.shape == (prompt.shape[0], P + new, VOCAB) and cache.length == P + new
    gaps = (cached - full).abs().amax(dim=(0, 2))
    assert float(gaps.max()) < 1e-10, f"cached logits differ from recomputation at positions {gaps.tolist()}"
    assert new < 2 or prompt.shape[0] < 2 or not torch.equal(sequence[0, P:], sequence[1, P:])
    out, logits = model.generate(prompt, new, temperature=1.0, generator=torch.Generator().manual_seed(2),
                                 return_logits=True)  # fmt: skip
    assert torch.equal(out, sequence)
    assert float((logits - full[:, P - 1 : -1]).abs().max()) < 1e-10
    return out, logits


def _moved(model, families):
    """``model`` with the parameters of its ``families`` steppers drawn away from where they start."""
    g = torch.Generator().manual_seed(3)
    steppers = [m for m in model.modules() if isinstance(m, families)]
    with torch.no_grad():
        for stepper in steppers:
            for parameter in stepper.parameters(recurse=False):
                before = parameter.clone()
                parameter.add_(torch.randn(parameter.shape, generator=g, dtype=parameter.dtype))
                assert not torch.equal(parameter, before)
    assert steppers
    return model


def _coefficients(name):
    """A named scheme's coefficients, given inline to the ``tableau`` solver."""
    value = solvers.TABLEAUX[name].tableau
    keys = {
        "runge_kutta": ("A", "b", "c"),
        "runge_kutta_nystrom": ("A", "bbar", "b", "c"),
        "splitting": ("drifts", "kicks"),
    }
    return {key: [list(v) if isinstance(v, tuple) else v for v in getattr(value, key)] for key in keys[value.kind]}


SCHEDULES = {
    **{name: name for name in odeformer.solver_names("discrete")},  # every preset and every registered stepper
    **{
        f"tableau_{name}": solver("tableau", options=_coefficients(name))
        for name in ("kutta3", "nystrom4", "forest_ruth")
    },
    "full_wave_strang": solver("full_wave", splitting="strang"),
    "diffusion_strang": solver("diffusion", splitting="strang"),
    "velocity_verlet_strang": solver("velocity_verlet", splitting="strang"),
    "hybrid": ["diffusion", "full_wave", "light_wave"],
}
LEARNABLE = (solvers.TwoStageRK, solvers.SymmetricSplitting, solvers.TripleJump)


# The named tableaux beyond one of each kind (Runge–Kutta, Runge–Kutta–Nyström, composition) run in the slow suite.
QUICK_TABLEAUX = {"kutta3", "nystrom4", "forest_ruth", "euler", "heun", "rk4", "rk4_38", "semi_implicit_euler"}
QUICK_TABLEAUX |= {"velocity_verlet"}
SLOW = set(solvers.TABLEAUX) - QUICK_TABLEAUX


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
        for name in sorted(SCHEDULES)
    ],
)  # fmt: skip
def test_cached_logits_equal_recomputation_under_every_scheme(name):
    _cached_equals_recomputed(_lm(SCHEDULES[name]))


@pytest.mark.parametrize("family", LEARNABLE, ids=lambda cls: cls.__name__)
def test_cached_logits_equal_recomputation_for_learnable_schemes_off_their_start(family):
    _cached_equals_recomputed(_moved(_lm(family), LEARNABLE))


@pytest.mark.parametrize("options", [{"tie_weights": True}, {"norm": "post"}, {"impl": "math"}, {"ln_mode": "exact"}])
def test_cached_logits_equal_recomputation_in_every_layout(options):
    for name in ("full_wave", "rk4"):
        _cached_equals_recomputed(_lm(name, **options))


def _passes(model, bind, new=4, prompt=None):
    """The logits of a prompt's pass and of ``new`` greedy one-token passes through a cache of ``bind``."""
    prompt = _prompt() if prompt is None else prompt
    cache = new_cache(model.eval(), bind=bind)
    with torch.inference_mode():
        passes = [model(prompt, cache=cache)]
        for _ in range(new):
            passes.append(model(passes[-1][:, -1:].argmax(-1), cache=cache))
    return torch.cat(passes, dim=1), cache


def _count_module_path(monkeypatch):
    """How often the cached attention runs through its module (``attend_cached``), counted in the list returned."""
    calls, original = [], AttentionField.attend_cached

    def counted(self, t, x, cache):
        calls.append(1)
        return original(self, t, x, cache)

    monkeypatch.setattr(AttentionField, "attend_cached", counted)
    return calls


LAYOUTS = {
    **{f"{name}_{key}": (name, {key: value}) for name in ("diffusion", "full_wave", "rk4")
       for key, value in (("tie_weights", True), ("norm", "post"), ("impl", "math"), ("ln_mode", "exact"))},
    "laplacian": (solver("diffusion", form="laplacian"), {}),
}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in sorted(SCHEDULES)]
    + [f"layout_{name}" for name in sorted(LAYOUTS)],
)
def test_a_binding_cache_gives_the_module_paths_logits_to_the_bit(name, monkeypatch):
    """What ``generate`` runs (a cache that binds the fields' weights once) makes exactly the logits of the cache
    that calls the modules, under every scheme and layout; and it does not call the attention modules at all."""
    schedule, options = LAYOUTS[name[len("layout_") :]] if name.startswith("layout_") else (SCHEDULES[name], {})
    model = _lm(schedule, **options)
    module_path, _ = _passes(model, bind=False)
    calls = _count_module_path(monkeypatch)
    bound, cache = _passes(model, bind=True)
    assert torch.equal(bound, module_path)
    assert not calls and cache.bound and cache.length == PROMPT + 4


def test_a_binding_cache_honours_hooks_training_mode_and_autograd(monkeypatch):
    """A hook on a module the bound fields leave out fires on every pass (the pass takes the module path), and the
    bound path resumes once it is removed; training mode and autograd take the module path too."""
    calls, seen = _count_module_path(monkeypatch), []
    layer, ffn, outside = ("backbone.layers.1.attention.qkv", 15), ("backbone.layers.2.ffn.mlp.fc1", 15), 0
    for name, hooked in (
        ("diffusion", (layer, ffn, ("head", outside), ("embed.tokens", outside))),
        ("full_wave", (layer,)),
    ):
        model = _lm(name)
        reference, _ = _passes(model, bind=False)
        calls.clear()
        for path, attention_calls in hooked:  # a hook outside the backbone leaves the backbone's pass bound
            handle = model.get_submodule(path).register_forward_hook(lambda m, args, out: seen.append(out.shape[1]))
            assert torch.equal(_passes(model, bind=True)[0], reference)
            assert seen == [PROMPT] + [1] * 4 and len(calls) == attention_calls, path
            handle.remove()
            seen.clear(), calls.clear()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: seen.append(type(m)))
    try:
        assert torch.equal(_passes(model, bind=True)[0], reference) and seen and len(calls) == 5 * 3
    finally:
        handle.remove()
    calls.clear()
    assert torch.equal(_passes(model, bind=True)[0], reference) and not calls
    cache = new_cache(model, bind=True)
    with torch.no_grad():
        model(_prompt(), cache=cache)  # autograd off, not inference mode: bound
        assert not calls
    with torch.enable_grad():
        model.train()
        logits = model(_prompt()[:, :1], cache=cache)  # training mode, autograd on: the module path
    assert len(calls) == 3 and logits.requires_grad
    reference = new_cache(model, bind=False)
    with torch.no_grad():
        model(_prompt(), cache=reference)
        assert torch.equal(logits, model(_prompt()[:, :1], cache=reference))


def test_a_binding_cache_sees_weights_updated_in_place_but_not_a_replaced_module():
    """What KVCache(bind=True) says: weights loaded in place between passes are seen (the bound fields hold the
    parameters themselves); a module replaced after the first pass is not, and a new cache sees it."""
    model, other = _lm("full_wave", seed=0).eval(), _lm("full_wave", seed=5).eval()
    token = _prompt()[:, :1]
    caches = {bind: new_cache(model, bind=bind) for bind in (True, False)}
    with torch.inference_mode():
        for cache in caches.values():
            model(_prompt(), cache=cache)
        model.load_state_dict(other.state_dict())
        bound, module_path = (model(token, cache=caches[bind]) for bind in (True, False))
    assert torch.equal(bound, module_path)
    replaced = torch.nn.Linear(8, 24, dtype=torch.float64)
    caches = {bind: new_cache(model, bind=bind) for bind in (True, False)}
    with torch.inference_mode():
        for cache in caches.values():
            model(_prompt(), cache=cache)
        model.backbone.layers[0].attention.qkv = replaced
        bound, module_path = (model(token, cache=caches[bind]) for bind in (True, False))
    assert not torch.equal(bound, module_path)  # the bound cache still steps on the module it read
    fresh = {bind: _passes(model, bind)[0] for bind in (True, False)}
    assert torch.equal(fresh[True], fresh[False])  # a new cache reads the module now there


def test_each_attention_evaluation_of_a_step_has_its_own_slot():
    """One slot for one-evaluation schemes, two for Verlet and Heun, four for RK4 (per layer)."""
    expected = {"diffusion": 1, "full_wave": 1, "leapfrog": 1, "mix": 1, "velocity_verlet": 2, "heun": 2, "rk4": 4}
    for name, slots in expected.items():
        model = _lm(name).eval()
        cache = new_cache(model)
        with torch.no_grad():
            model(_prompt(), cache=cache)
        assert cache.slots() == [slots] * 3, name
        assert cache.length == PROMPT


def test_the_cache_steps_new_positions_only_and_matches_the_whole_sequence():
    """The public cache: the prompt, then one token at a time, each pass with the new positions only."""
    model = _lm("velocity_verlet").eval()
    tokens = _prompt(length=8)
    cache = new_cache(model)
    with torch.no_grad():
        parts = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(5, 8)]
        assert float((torch.cat(parts, dim=1) - model(tokens)).abs().max()) < 1e-10
        with pytest.raises(ValueError, match="exceed max_len"):
            model(torch.zeros(2, MAX_LEN, dtype=torch.long), cache=cache)


USER = '''
from typing import ClassVar

import torch
from solvers import AbstractStepper


class Ralston(AbstractStepper):
    """Ralston's second-order Runge-Kutta: a user's scheme with two evaluations per step."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + 2 * dt / 3, y + (2 * dt / 3) * k1)
        return y + dt * (0.25 * k1 + 0.75 * k2), state


class Restless(AbstractStepper):
    """Evaluates the field once more when its state is large: its evaluations depend on the state."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        if y.shape[1] > 1:
            f = 0.5 * (f + field(t, y + dt * f))
        return y + dt * f, state


class Centred(AbstractStepper):
    """Subtracts the mean over the sequence: mixes tokens outside attention."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def step(self, field, t, y, dt, state):
        y1 = y + dt * field(t, y)
        return y1 - 0.5 * y1.mean(dim=1, keepdim=True), state
'''


@pytest.fixture
def user_schemes(tmp_path, monkeypatch):
    (tmp_path / "generate_user_schemes.py").write_text(textwrap.dedent(USER))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "generate_user_schemes"
    sys.modules.pop("generate_user_schemes", None)


def test_a_users_scheme_by_its_path_caches_without_writing_anything(user_schemes):
    model = _lm(solver(f"{user_schemes}.Ralston"))
    _cached_equals_recomputed(model)
    cache = new_cache(model)
    with torch.no_grad():
        model.eval()(_prompt(), cache=cache)
    assert cache.slots() == [2, 2, 2]


def test_a_scheme_whose_evaluations_vary_is_a_one_line_error(user_schemes):
    model = _lm(solver(f"{user_schemes}.Restless"))
    with pytest.raises(CacheError, match=r"evaluated its attention .*cache=False") as caught:
        model.generate(_prompt(), 3, temperature=0.0)
    assert "\n" not in str(caught.value)
    out, logits = model.generate(_prompt(), 3, temperature=0.0, cache=False, return_logits=True)
    with torch.no_grad():
        assert float((model(out[:, :-1])[:, PROMPT - 1 :] - logits).abs().max()) < 1e-10


def test_a_scheme_that_mixes_tokens_is_caught_by_comparison_with_recomputation(user_schemes):
    model = _lm(solver(f"{user_schemes}.Centred"))
    with pytest.raises(CacheError, match=r"not causal token by token.*cache=False") as caught:
        model.generate(_prompt(), 3, temperature=0.0)
    assert "\n" not in str(caught.value)


def test_a_fixed_grid_continuous_solver_caches():
    for dynamics in ("diffusion", "wave"):
        model = _lm(continuous("rk4_grid", method="rk4", steps=2, equation=dynamics, time_embedding=True))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _cached_equals_recomputed(model, new=4)
        cache = new_cache(model)
        with torch.no_grad():
            model.eval()(_prompt(), cache=cache)
        assert cache.slots()[0] >= 8  # 4 stages x 2 steps (and the interpolation's evaluations)


def test_an_adaptive_continuous_solver_recomputes_and_says_so():
    """Its steps depend on every token, so the whole sequence's forward is no reference for the earlier positions'
    logits; each token's logits are those of a forward of the sequence before it."""
    model = _lm(continuous("dopri5"))
    with pytest.warns(UserWarning, match="adaptive solver 'dopri5'.*recomputes"):
        out, logits = model.generate(_prompt(), 3, temperature=0.0, return_logits=True)
    with torch.no_grad():
        for i in range(3):
            assert float((model(out[:, : PROMPT + i])[:, -1] - logits[:, i]).abs().max()) == 0.0
    with pytest.raises(ValueError, match="only torchdiffeq's fixed grid"):
        model(_prompt(), cache=new_cache(model))


def test_past_max_len_the_context_is_the_last_max_len_tokens():
    model = _lm("full_wave")
    out, logits = model.generate(_prompt(length=12), 10, temperature=0.0, return_logits=True)
    assert out.shape == (2, 22)
    with torch.no_grad():
        for i in range(10):
            context = out[:, : 12 + i][:, -MAX_LEN:]
            assert float((model(context)[:, -1] - logits[:, i]).abs().max()) < 1e-10


def test_a_model_trains_on_what_it_generated_after_inference_mode():
    """generate runs in inference mode: its tokens and logits come back as ordinary tensors, and nothing kept from
    that pass (Full Wave's fused-MLP scratch buffers) stops the model from training afterwards; nor does a forward
    of the user's under torch.inference_mode."""
    model = _lm("full_wave")
    out, logits = model.generate(_prompt(), 3, temperature=0.0, return_logits=True)
    assert not out.is_inference() and not logits.is_inference()
    with torch.inference_mode():
        model(_prompt())
    model(out).square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)


def test_sampling_greedy_top_k_and_generator():
    model = _lm("full_wave")
    prompt = _prompt()
    greedy = model.generate(prompt, NEW, temperature=0.0)
    assert torch.equal(model.generate(prompt, NEW, top_k=1), greedy)  # top_k=1 is greedy at any temperature
    draws = [model.generate(prompt, NEW, 1.5, 4, torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    recomputed = model.generate(prompt, NEW, 1.5, 4, torch.Generator().manual_seed(7), cache=False)
    assert torch.equal(draws[0], recomputed)  # the same logits, so the same draws
    assert torch.equal(model.generate(prompt[0], NEW, temperature=0.0), greedy[0])  # a 1-D prompt, a 1-D result
    assert torch.equal(model.generate(prompt, 0), prompt)


def test_generate_leaves_the_mode_and_the_rng_as_they_were():
    model = _lm("full_wave", dropout=0.1).train()
    state = torch.get_rng_state()
    model.generate(_prompt(), 4, generator=torch.Generator().manual_seed(0))
    assert model.training and torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.generate([[1, 2, 3], [4, 5]], 2), r"prompts of one length, got lengths \[2, 3\].*padding"),
        (
            lambda m: m.generate(torch.ones(2, 3, dtype=torch.long), 2, padding_mask=torch.tensor([[0, 1, 1]] * 2)),
            "padding",
        ),
        (lambda m: m.generate(torch.ones(1, MAX_LEN + 1, dtype=torch.long), 2), "more than the model's max_len"),
        (lambda m: m.generate(torch.full((1, 2), VOCAB), 2), "token ids must lie"),
        (lambda m: m.generate(torch.ones(1, 0, dtype=torch.long), 2), "at least one prompt token"),
        (lambda m: m.generate(torch.ones(1, 2, dtype=torch.long), -1), "max_new_tokens"),
        (lambda m: m.generate(torch.ones(1, 2, dtype=torch.long), 2, temperature=-1.0), "temperature"),
        (lambda m: m.generate(torch.ones(1, 2, dtype=torch.long), 2, top_k=0), "top_k"),
        (lambda m: m.generate(torch.ones(1, 2), 2), "integer tokens"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(ValueError, match=message) as caught:
        call(_lm("diffusion"))
    assert "\n" not in str(caught.value)


def test_equal_prompts_given_as_lists_are_a_batch():
    model = _lm("diffusion")
    lists = model.generate([[1, 2, 3], [4, 5, 6]], 3, 0.0)
    assert torch.equal(lists, model.generate(torch.tensor([[1, 2, 3], [4, 5, 6]]), 3, 0.0))


# ---------------------------------------------------------------------------------------------- Hugging Face GPT-2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_tokens_equal_transformers_cached_generate(seed):
    """The from_hf copy under diffusion generates, greedily and with its cache, the tokens GPT-2's own generate
    makes with its cache (random configurations: heads, widths, depth, activation, tied or untied head)."""
    transformers = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(seed)
    heads, head_dim, depth = (int(torch.randint(lo, hi, (), generator=g)) for lo, hi in ((1, 4), (2, 6), (1, 4)))
    act = ("gelu_new", "gelu", "relu")[seed % 3]
    config = transformers.GPT2Config(
        n_embd=heads * head_dim, n_layer=depth, n_head=heads, vocab_size=29, n_positions=40, activation_function=act,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=seed != 1, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        hf = transformers.GPT2LMHeadModel(config).double().eval()
        with torch.no_grad():
            for p in hf.parameters():
                p.add_(0.3 * torch.randn_like(p))
    prompt = torch.randint(0, 29, (3, 4), generator=g)
    expected = hf.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, min_new_tokens=20, do_sample=False,
        use_cache=True, pad_token_id=0, eos_token_id=None,
    )  # fmt: skip
    model = odeformer.from_hf(hf, solver="diffusion")
    assert torch.equal(model.generate(prompt, 20, temperature=0.0), expected)


def test_the_generation_benchmark_times_generations_that_agree():
    """benchmarks/generation.py (make bench): cached and recomputed generation, and GPT-2's, make the same tokens."""
    from benchmarks.generation import generation_rounds, generation_times, medians, ratios

    times, agree = generation_times(1, "cpu", tokens=3)
    assert set(times) >= {"cached", "recompute", "full_wave"} and agree and all(agree.values())
    measured = ratios(times)
    assert {"generate_cache_speedup", "generate_full_vs_diffusion_time"} <= set(measured)
    if "handwritten_cached" in times:  # GPT-2's weights, with transformers installed
        assert agree["cached_equals_handwritten"] and measured["generate_vs_handwritten_time"] > 0
    samples, _ = generation_rounds(2, "cpu", tokens=2)
    assert all(len(values) == 2 for values in samples.values()) and set(samples) == set(times)
    # paired: the median of the rounds' own ratios (1, 1, 1/3), not the ratio of the medians (1 / 3)
    rounds = {"cached": [1.0, 4.0, 3.0], "recompute": [2.0, 8.0, 6.0], "full_wave": [1.0, 4.0, 1.0]}
    paired = ratios(medians(rounds), rounds)
    assert paired["generate_cache_speedup"] == 2.0 and paired["generate_full_vs_diffusion_time"] == 1.0
    assert ratios(medians(rounds))["generate_full_vs_diffusion_time"] == 1 / 3
