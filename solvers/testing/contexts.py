"""The execution context as part of what is drawn: a scheme steps the same in every context a model runs it in.

A model runs a step in float32 with autograd on (training), under ``torch.inference_mode()`` (generation), under bf16
autocast on a GPU, in half precision after ``.half()``, with one thread or several, on an ``nn.Module`` field built
from attention and an FFN, on states of thousands to millions of entries that are views (transposed, sliced,
expanded), of rank 2 to 4, at times up to depth times ``dt``, with ``t`` and ``dt`` as floats or 0-d tensors (a
learnable step size requires grad), on fields in training or in eval mode. The other checks run float64, autograd off,
a plain function on small contiguous states. A scheme that branches on any of these passes them and is wrong where it
is used. Here every drawn instance is run in a drawn :class:`Context` and compared with the :data:`REFERENCE` context
(float64, no grad, a plain function, contiguous, floats, one thread) from the same state.

What a scheme may branch on is also what the reference must not share. A context's far start time is therefore
compared with the reference at the instance's own start, the context's field shifted in time to match (a step
commutes with a shift of time); and a context's ``scale`` (a power of two) runs the state and the field scaled by it,
compared with the reference at the instance's own magnitude (a step commutes with scaling the state and the field;
by a power of two that is exact in floating point). A scheme that takes another path far from ``t = 0``, or for
large or small states, is compared with its own step where the other checks vouch for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import Tensor, nn

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import _copy, _float64, _fresh_step, _instance, _name, rounded_field, rounding_model
from ._drawn import check_drawn, reject
from .problems import _cos, generator, stepper_width
from .protocol import amplification, best_quotient, float32_allowance
from .references import _flat, _unflat
from .strategies import Instance, instances

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
"""The state dtypes drawn: float64, float32 (training), float16 and bfloat16 (a model cast with ``.half()``; the
stepper is cast with it)."""
MODES = ("no_grad", "enable_grad", "inference_mode")
"""Autograd off, on with a state that requires grad (training), ``torch.inference_mode()`` (generation)."""
FIELDS = ("function", "module", "eval module", "attention", "given")
"""A plain function, the same field as an ``nn.Module`` (in training mode, as a model trains) and in eval mode (as a
model generates), a field of softmax attention and a GELU FFN on LayerNorm'd states (an ``nn.Module`` with
parameters, through ``scaled_dot_product_attention``), and a field you give (``check_contexts(..., fields=...)``, e.g.
your model's own attention and FFN)."""
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")
"""How the state is laid out: contiguous, a transposed view (the same values, other strides), every other entry of a
wider tensor, and a sample expanded over the batch (stride 0)."""
TIMES = ("float", "tensor", "learnable dt")
"""``t0`` and ``dt`` as Python floats, as 0-d float64 tensors, and with ``dt`` a 0-d tensor that requires grad."""
SCALES = th.CONTEXT_SCALES
"""The powers of two the state and the field are scaled by range between these (``CONTEXT_SCALES``)."""

_EPS = {torch.float64: th.EPS, torch.float32: th.EPS32}


def _eps(dtype: torch.dtype) -> float:
    return _EPS.get(dtype) or torch.finfo(dtype).eps


@dataclass(frozen=True)
class Context:
    """Where a step runs: its state ``dtype``; its grad ``mode`` (:data:`MODES`); its ``field`` (:data:`FIELDS`);
    whether under bf16 ``autocast``; the intra-op ``threads``; the state's ``layout`` (:data:`LAYOUTS`); ``rank4``
    (the state viewed with a head dimension, ``(batch, 1, tokens, width)``); how ``time`` is handed over
    (:data:`TIMES`); a start time ``t0`` replacing the instance's (``None``: the instance's; the field is shifted in
    time so that the run is the instance's, and the reference runs from the instance's own start); a ``size``,
    ``(tokens, width)`` or ``"large"`` (at least ``CONTEXT_LARGE_STATE`` entries), replacing the instance's shape
    (``None``: the instance's; a per-channel stepper keeps its width); and a ``scale``, a power of two the state and
    the field are scaled by (``m f(t, x / m)``; the reference runs unscaled, and the run is compared after dividing by
    it)."""

    dtype: torch.dtype = torch.float64
    mode: str = "no_grad"
    field: str = "function"
    autocast: bool = False
    threads: int = 1
    layout: str = "contiguous"
    rank4: bool = False
    time: str = "float"
    t0: float | None = None
    size: tuple[int, int] | str | None = None
    scale: float = 1.0

    def __str__(self) -> str:
        kinds = {
            "function": "a plain function",
            "module": "an nn.Module field",
            "eval module": "an nn.Module field in eval mode",
            "attention": "an attention and FFN nn.Module field",
            "given": "the field given",
        }
        parts = [str(self.dtype).removeprefix("torch."), self.mode, kinds[self.field]]
        if self.autocast:
            parts.append("under bf16 autocast")
        if self.threads != 1:
            parts.append(f"{self.threads} threads")
        if self.layout != "contiguous":
            parts.append(f"a {self.layout} view")
        if self.rank4:
            parts.append("4-D states")
        if self.time != "float":
            parts.append("t0 and dt as 0-d tensors" if self.time == "tensor" else "dt a 0-d tensor requiring grad")
        if self.t0 is not None:
            parts.append(f"from t = {self.t0:.4g}")
        if self.size == "large":
            parts.append(f"at least {th.CONTEXT_LARGE_STATE} entries")
        elif self.size is not None:
            parts.append(f"{self.size[0]} tokens x width {self.size[1]}")
        if self.scale != 1.0:
            parts.append(f"state and field scaled by 2^{round(math.log2(self.scale))}")
        return ", ".join(parts)

    def grad(self) -> AbstractContextManager:
        return {"no_grad": torch.no_grad, "enable_grad": torch.enable_grad, "inference_mode": torch.inference_mode}[
            self.mode
        ]()

    def entered(self) -> ExitStack:
        """Enter the grad mode, autocast and thread count; leaving restores them."""
        stack = ExitStack()
        stack.enter_context(self.grad())
        stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16) if self.autocast else nullcontext())
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        stack.callback(torch.set_num_threads, threads)
        return stack


@dataclass(frozen=True)
class _InContext:
    instance: Instance
    context: Context

    def __str__(self) -> str:
        resized = " (the context sets its shape)" if self.context.size is not None else ""
        return f"{self.instance}{resized}; in context ({self.context})"


REFERENCE = Context()
"""The context the other checks run in (float64, no grad, a plain function, contiguous, floats, one thread); every
drawn context is compared with it."""

CONTEXTS = (
    Context(torch.float64, "no_grad", "function"),
    Context(torch.float32, "no_grad", "function"),
    Context(torch.float64, "enable_grad", "function"),
    Context(torch.float32, "enable_grad", "function", layout="transposed", time="tensor"),
    Context(torch.float64, "inference_mode", "function"),
    Context(torch.float32, "inference_mode", "eval module"),
    Context(torch.float32, "no_grad", "module", threads=2),
    Context(torch.float64, "enable_grad", "module", time="learnable dt", scale=SCALES[0]),
    Context(torch.float32, "enable_grad", "module", autocast=True),
    Context(torch.float32, "inference_mode", "module", layout="expanded"),
    Context(torch.float64, "inference_mode", "attention", layout="sliced"),
    Context(torch.float32, "enable_grad", "attention", scale=SCALES[1]),
    Context(torch.float64, "no_grad", "function", rank4=True, t0=500.0),
    Context(torch.float32, "no_grad", "eval module", time="tensor", t0=-64.0),
    Context(torch.float64, "no_grad", "function", t0=40.0, scale=SCALES[1]),
    Context(torch.float16),
    Context(torch.bfloat16, "enable_grad", "module"),
    Context(torch.float32, "enable_grad", "module", size=(197, 192)),
    Context(torch.float32, "enable_grad", "module", size=(32, 768)),
    Context(torch.float32, "no_grad", "module", size="large"),
)
"""The contexts every check runs first, on a fixed instance: each value of every aspect at least once, and float64
and float32 with each grad mode (half precision; autocast; each field kind; two threads; each layout; 4-D states;
tensor and learnable times; far start times; states scaled up and down; a DeiT-Tiny sequence, a GPT-2 width and a
large state). Then instances are drawn with a context each (:func:`contexts`), every transformer size among them."""


def contexts(given: bool = False):
    """Strategy: a :class:`Context` with every aspect drawn (the ``given`` field kind only when a field is given; a
    transformer size in one draw in four; see :func:`_drawable`)."""
    low, high = (math.log10(t) for t in th.T0_RANGE)
    far = st.builds(lambda e, sign: sign * 10.0**e, st.floats(low, high), st.sampled_from([1.0, -1.0]))
    return st.builds(
        Context,
        dtype=st.sampled_from(DTYPES),
        mode=st.sampled_from(MODES),
        field=st.sampled_from(FIELDS if given else FIELDS[:-1]),
        autocast=st.booleans(),
        threads=st.sampled_from([1, 2]),
        layout=st.sampled_from(LAYOUTS),
        rank4=st.booleans(),
        time=st.sampled_from(TIMES),
        t0=st.one_of(st.none(), far),
        size=st.integers(0, 3).flatmap(
            lambda k: st.sampled_from([*th.CONTEXT_SIZES, "large"]) if k == 3 else st.none()
        ),
        scale=st.one_of(st.just(1.0), st.sampled_from(SCALES), st.integers(*_exponents()).map(lambda k: 2.0**k)),
    ).map(_drawable)


def _exponents() -> tuple[int, int]:
    low, high = (round(math.log2(s)) for s in SCALES)
    return low, high


def _drawable(context: Context) -> Context:
    """A drawn context as a model runs: no autocast over half-precision states (a model cast to half does not run
    under it), nor a scale (half precision keeps its magnitudes in ``HALF_MAGNITUDES``), and two threads on the
    instance's own small state (a large state's every op at two threads on a busy machine costs seconds; the fixed
    contexts run two threads and the sizes apart)."""
    if context.dtype in (torch.float16, torch.bfloat16):
        context = replace(context, autocast=False, scale=1.0)
    if context.size is not None:
        context = replace(context, threads=1)
    return context


# -- fields ----------------------------------------------------------------------------------------------------------


class AttentionFFN(nn.Module):
    """``f(t, X) = (1 + ½ cos(2t + 0.7)) (Attn(LN(X)) + FFN(LN(X)))`` per sample, float64, weights from ``seed``:
    softmax self-attention over the tokens (two heads where the width is even and at least 4) through
    ``scaled_dot_product_attention``, and a GELU MLP of hidden width ``4 * width``. States ``(batch, width)`` are
    one token each."""

    def __init__(self, width: int, seed: int):
        super().__init__()
        g = generator(seed)

        def weight(rows: int, cols: int) -> nn.Parameter:
            w = torch.randn(rows, cols, generator=g, dtype=torch.float64) / cols**0.5
            return nn.Parameter(w, requires_grad=False)

        self.width, self.heads = width, 2 if width % 2 == 0 and width >= 4 else 1
        self.qkv, self.out = weight(3 * width, width), weight(width, width)
        self.up, self.down = weight(4 * width, width), weight(width, 4 * width)

    def forward(self, t, x: Tensor) -> Tensor:
        rows = x.dim() == 2
        h = x.unsqueeze(-2) if rows else x
        h = F.layer_norm(h, (self.width,))
        batch, tokens = h.shape[0], h.shape[-2]
        q, k, v = (
            u.reshape(batch, tokens, self.heads, -1).transpose(1, 2) for u in F.linear(h, self.qkv).chunk(3, dim=-1)
        )
        attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, self.width)
        out = F.linear(attended, self.out) + F.linear(F.gelu(F.linear(h, self.up)), self.down)
        out = (1 + 0.5 * _cos(2 * t + 0.7)) * out
        return out.squeeze(-2) if rows else out


class _Peak:
    """A field that records the largest magnitude it is evaluated at or returns (a step's stages)."""

    def __init__(self, field: Callable):
        self.field, self.largest = field, 0.0

    def __call__(self, t, x):
        f = self.field(t, x)
        self.largest = max(self.largest, float(x.abs().max()), float(f.abs().max()))
        return f


class _Scaled:
    """A magnitude-free field at the problem's magnitude ``m``: ``m f(t, x / m)`` (the problem stays the problem)."""

    def __init__(self, field: Callable, scale: float):
        self.field, self.scale = field, scale

    def __call__(self, t, x):
        return self.scale * self.field(t, x / self.scale)


class _Counted:
    """A field that counts its evaluations and records their times, evaluating in float64 on the instance's own
    shape (a 4-D view is reshaped to it) and rounding the result back to the state's dtype (so the field is exact
    and the step's own arithmetic is what a low-precision run measures)."""

    def __init__(self, field: Callable, shape: torch.Size | None = None):
        self.field, self.shape, self.calls, self.times = field, shape, 0, []

    def __call__(self, t, x):
        self.calls += 1
        self.times.append(float(t.detach()) if isinstance(t, Tensor) else float(t))
        z = x.to(torch.float64)
        out = self.field(t, z if self.shape is None else z.reshape(self.shape))
        return (out if self.shape is None else out.reshape(x.shape)).to(x.dtype)


class _ModuleField(nn.Module):
    """The same field as an ``nn.Module`` (every model's field is one)."""

    def __init__(self, counted: _Counted):
        super().__init__()
        self.counted = counted

    def forward(self, t, x):
        return self.counted(t, x)


def _field(exact: Callable, kind: str, shape: torch.Size | None = None) -> tuple[_Counted, Any]:
    counted = _Counted(exact, shape)
    if kind == "function":
        return counted, counted
    module = _ModuleField(counted)
    return counted, (module.eval() if kind == "eval module" else module)


class _Shifted:
    """``f(t - shift, x)``: the field of a run started ``shift`` later, so that it is the same run."""

    def __init__(self, field: Callable, shift: float):
        self.field, self.shift = field, shift

    def __call__(self, t, x):
        return self.field(t - self.shift, x)


def _exact(problem, context: Context, seed: int, given: Callable | None, stepper: AbstractStepper):
    """The float64 field of this context on the instance's own shape: the problem's, or an attention and FFN field
    (or the one given) at the problem's magnitude."""
    if context.field in ("function", "module", "eval module"):
        return problem.field_for(stepper)
    width = problem.x0.shape[-1]
    built = AttentionFFN(width, seed) if context.field == "attention" else given(width, seed)
    if isinstance(built, nn.Module):
        built = built.to(torch.float64).eval()
    return _Scaled(built if context.field == "attention" else _AsTokens(built), problem.scale)


class _AsTokens:
    """A field given for states ``(batch, tokens, width)``, on rows ``(batch, width)`` as one token each."""

    def __init__(self, field: Callable):
        self.field = field

    def __call__(self, t, x):
        return self.field(t, x.unsqueeze(-2)).squeeze(-2) if x.dim() == 2 else self.field(t, x)


# -- states ----------------------------------------------------------------------------------------------------------


def _laid_out(u: Tensor, layout: str, rank4: bool) -> Tensor:
    """``u`` (a leaf) as the context lays it out: a view of another layout, with a head dimension if ``rank4``."""
    if rank4:
        u = u.unsqueeze(1) if u.dim() == 3 else u.unsqueeze(1).unsqueeze(1)
    if layout == "transposed":
        return u.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":
        wide = torch.zeros(*u.shape[:-1], 2 * u.shape[-1], dtype=u.dtype)
        wide[..., ::2] = u
        return wide[..., ::2]
    if layout == "expanded":
        return u[:1].expand_as(u)
    return u


def _start(y0: Tensor | PhaseState, context: Context) -> tuple[Any, list[Tensor]]:
    """The state a run in ``context`` starts from (cast, laid out, requiring grad in training) and its leaves."""
    leaves, laid = [], []
    for u in y0 if isinstance(y0, PhaseState) else (y0,):
        leaf = u.detach().to(context.dtype)
        if context.mode == "enable_grad":
            leaf.requires_grad_(True)
        leaves.append(leaf)
        laid.append(_laid_out(leaf, context.layout, context.rank4))
    return (PhaseState(*laid) if isinstance(y0, PhaseState) else laid[0]), leaves


def _time(value: float, context: Context, is_dt: bool):
    if context.time == "float":
        return value
    return torch.tensor(value, dtype=torch.float64).requires_grad_(is_dt and context.time == "learnable dt")


def _detached(y: Tensor | PhaseState) -> Tensor:
    """``y`` flat, detached, a copy in float64 (half-precision values are exact in it)."""
    return _flat(PhaseState(*(u.detach().double() for u in y)) if isinstance(y, PhaseState) else y.detach().double())


def _inputs(y: Tensor | PhaseState) -> list[Tensor]:
    return [u for u in (y if isinstance(y, PhaseState) else (y,)) if u.requires_grad]


@dataclass
class _Run:
    counts: list[int]
    times: list[list[float]]
    starts: list[Tensor]
    fresh: list[Tensor]
    carried: list[Tensor]
    inverses: list[Tensor | None]
    grads: list[tuple[Tensor, float | None] | None]


def _cotangent(n: int, seed: int) -> Tensor:
    return torch.randn(n, generator=generator(seed), dtype=torch.float64)


def _run(
    stepper: AbstractStepper, exact: Callable, y0, t0: float, dts: list[float], context: Context, seed: int
) -> _Run:
    """Take the steps in ``context`` with one field for all of them, the state carried; record each step's
    evaluation count and times, the state it started from, a step from a fresh ``init`` from that state (and its
    inverse where the scheme is reversible, and in training its gradient along a fixed cotangent with respect to the
    state and a learnable ``dt``), and the carried step (all detached, flat)."""
    native = (y0.x if isinstance(y0, PhaseState) else y0).shape
    counted, field = _field(exact, context.field, native if context.rank4 else None)
    run = _Run([], [], [], [], [], [], [])
    with context.entered():
        y, _ = _start(y0, context)
        t = _time(t0, context, False)
        state = stepper.init(field, t, y)
        for i, dt_value in enumerate(dts):
            dt = _time(dt_value, context, True)
            fresh = _fresh_step(stepper, field, t, y, dt)  # from the same start, for the reference to compare
            grads = None
            if context.mode == "enable_grad" and context.dtype in (torch.float32, torch.float64):
                # from leaves holding the state's values: the carried state's parts depend on each other
                leaves = [u.detach().requires_grad_(True) for u in (y if isinstance(y, PhaseState) else (y,))]
                start = PhaseState(*leaves) if isinstance(y, PhaseState) else leaves[0]
                inputs = leaves + ([dt] if isinstance(dt, Tensor) and dt.requires_grad else [])
                out = _flat(_fresh_step(stepper, field, t, start, dt))
                if out.requires_grad:
                    r = _cotangent(out.numel(), seed + i).to(out.dtype)
                    found = torch.autograd.grad((out * r).sum(), inputs, allow_unused=True)
                    found = [torch.zeros_like(u) if g is None else g for u, g in zip(inputs, found)]
                    n = len(leaves)
                    on_y = torch.cat([g.reshape(-1) for g in found[:n]]).detach().double()
                    grads = (on_y, float(found[n]) if len(found) > n else None)
            run.grads.append(grads)
            run.inverses.append(_detached(stepper.inverse(field, t, fresh, dt)) if stepper.reversible else None)
            after_fresh = len(counted.times)
            y1, state = stepper.step(field, t, y, dt, state)
            run.counts.append(len(counted.times) - after_fresh)
            run.times.append(counted.times[after_fresh:])
            run.starts.append(_detached(y))
            run.fresh.append(_detached(fresh))
            run.carried.append(_detached(y1))
            y, t = y1, t + dt
    return run


def _reference_grads(
    stepper: AbstractStepper,
    exact: Callable,
    y: Any,
    t: float,
    dt: float,
    learnable: bool,
    r: Tensor,
    rounding: float = 0.0,
    seed: int = 0,
):
    """The reference gradient of a step from ``y`` (float64, a plain function, autograd on) along the cotangent ``r``
    with respect to the state and (``learnable``) ``dt``; returns it, ``r`` and the ``dt`` gradient (or ``None``).
    With ``rounding``, every evaluation's input and result are perturbed by that relative size (a model of rounding,
    which the backward pass sees too)."""
    leaves = [u.detach().clone().requires_grad_(True) for u in _parts(y)]
    start = PhaseState(*leaves) if isinstance(y, PhaseState) else leaves[0]
    step = torch.tensor(dt, dtype=torch.float64, requires_grad=True) if learnable else dt
    if rounding:
        counted = rounded_field(exact, rounding_model(rounding, seed))
    else:
        counted, _ = _field(exact, "function")
    with torch.enable_grad():
        out = _flat(_fresh_step(stepper, counted, t, start, step))
        inputs = leaves + ([step] if learnable else [])
        found = torch.autograd.grad((out * r).sum(), inputs, allow_unused=True)
    found = [torch.zeros_like(u) if g is None else g for u, g in zip(inputs, found)]
    on_y = torch.cat([g.reshape(-1) for g in found[: len(leaves)]])
    return on_y, r, (float(found[-1]) if learnable else None)


def _parts(y: Tensor | PhaseState) -> tuple[Tensor, ...]:
    return tuple(y) if isinstance(y, PhaseState) else (y,)


def _reshaped(y: Tensor | PhaseState, batch: int) -> Tensor | PhaseState:
    """A state of ``y``'s form with ``batch`` samples (only its shape is used)."""
    parts = [u.new_zeros(batch, *u.shape[1:]) for u in _parts(y)]
    return PhaseState(*parts) if isinstance(y, PhaseState) else parts[0]


@dataclass(frozen=True)
class _Tiling:
    """A context's size reached by tiling: ``counts = (nB, nT, nW)`` independent copies of the instance's own state
    (``base``, ``(batch, tokens, width)`` or ``(batch, width)``) along the batch, the tokens (attention within a
    tile's tokens) and the channels. The field acts on each tile alone, so a correct step on the whole state is the
    step on each tile: a scheme that takes another path at transformer sizes is compared with its own step on the
    small tiles the other checks vouch for."""

    base: tuple[int, ...]
    counts: tuple[int, int, int]

    @property
    def tiles(self) -> int:
        return self.counts[0] * self.counts[1] * self.counts[2]

    @property
    def shape(self) -> tuple[int, ...]:
        (nb, nt, nw), base = self.counts, self.base
        if len(base) == 2:
            return (nb * base[0], nw * base[1])
        return (nb * base[0], nt * base[1], nw * base[2])

    def split(self, x: Tensor) -> Tensor:
        """``x`` of the whole shape as its tiles stacked along the batch, ``(tiles * batch, *base[1:])``."""
        (nb, nt, nw), base = self.counts, self.base
        if len(base) == 2:
            u = x.reshape(nb, base[0], nw, base[1]).permute(0, 2, 1, 3)
        else:
            u = x.reshape(nb, base[0], nt, base[1], nw, base[2]).permute(0, 2, 4, 1, 3, 5)
        return u.reshape(self.tiles * base[0], *base[1:])

    def join(self, tiles: Tensor) -> Tensor:
        (nb, nt, nw), base = self.counts, self.base
        if len(base) == 2:
            return tiles.reshape(nb, nw, base[0], base[1]).permute(0, 2, 1, 3).reshape(self.shape)
        u = tiles.reshape(nb, nt, nw, base[0], base[1], base[2]).permute(0, 3, 1, 4, 2, 5)
        return u.reshape(self.shape)

    def picked(self, seed: int) -> list[int]:
        """The tiles compared with the reference: the first, the last and two drawn ones."""
        g = generator(seed)
        drawn = torch.randint(self.tiles, (2,), generator=g).tolist()
        return sorted({0, self.tiles - 1, *drawn})

    def take(self, flat: Tensor, like: Any, which: list[int]) -> Tensor:
        """The ``which`` tiles of a flat state of the whole shape (``like`` its form), flat."""
        y = _unflat(flat, like)
        parts = y if isinstance(y, PhaseState) else (y,)
        base = self.base[0]
        out = []
        for u in parts:
            t = self.split(u).reshape(self.tiles, base, *self.base[1:])[which]
            out.append(t.reshape(len(which) * base, *self.base[1:]))
        return _flat(PhaseState(*out) if isinstance(y, PhaseState) else out[0])


def _tiling(inst: Instance, context: Context, fixed_width: int | None) -> tuple[Instance, _Tiling]:
    """The instance whose state is one tile (a token problem for a ``(tokens, width)`` size), and how many tiles the
    context's size takes (a per-channel stepper's channels are not tiled); in half precision the magnitude is clamped
    into ``HALF_MAGNITUDES``."""
    if context.dtype in (torch.float16, torch.bfloat16):
        low, high = th.HALF_MAGNITUDES
        inst = replace(inst, magnitude=min(max(inst.magnitude, low), high))
    if context.size is not None and context.size != "large" and inst.tokens == 0:
        inst = replace(inst, tokens=1)
    base = (inst.batch, inst.tokens, inst.width) if inst.tokens else (inst.batch, inst.width)
    if context.size is None:
        return inst, _Tiling(base, (1, 1, 1))
    if context.size == "large":
        entries = inst.batch * max(inst.tokens, 1) * inst.width
        return inst, _Tiling(base, (math.ceil(th.CONTEXT_LARGE_STATE / entries), 1, 1))
    tokens, width = context.size
    nw = 1 if fixed_width else math.ceil(width / inst.width)
    return inst, _Tiling(base, (1, math.ceil(tokens / inst.tokens), nw))


class _Tiled:
    """The field of the whole tiled state: the instance's field on every tile alone."""

    def __init__(self, field: Callable, tiling: _Tiling):
        self.field, self.tiling = field, tiling

    def __call__(self, t, x):
        return self.tiling.join(self.field(t, self.tiling.split(x)))


def _in_dtype(stepper: AbstractStepper, dtype: torch.dtype) -> AbstractStepper:
    """The stepper as a model in ``dtype`` holds it (float32 as drawn; float64 and half precision cast)."""
    if dtype == torch.float32:
        return stepper
    if dtype == torch.float64:
        return _float64(_copy(stepper))
    tensors = [*stepper.parameters(), *stepper.buffers()]
    return _copy(stepper).to(dtype) if any(t.is_floating_point() for t in tensors) else stepper


def check_contexts(
    stepper: AbstractStepper | type[AbstractStepper],
    dim: int | None = None,
    examples: int = th.EXAMPLES,
    fields: Callable[[int, int], Callable] | None = None,
) -> float:
    """Assert a step is the same in every context a model runs it in as in the :data:`REFERENCE` (float64, no grad,
    a plain function, contiguous, floats, one thread): first in each of :data:`CONTEXTS` on a fixed instance, then on
    ``examples`` drawn instances (:func:`~solvers.testing.strategies.instances`, up to 4 steps) each in a drawn
    :func:`contexts`. In each, a run with one field for all steps, the state carried, must

    1. evaluate the field as often at every step as the reference run from the same start (``evals_per_step``,
       first-same-as-last, start-up), at the same times (to float64's rounding);
    2. at every step, take a step from a fresh ``init`` that agrees with the reference step from the same state, and
       (``reversible``) an inverse that agrees with the reference inverse; unless ``multistep``, a carried step that
       agrees with the fresh one;
    3. in training (``enable_grad``, float32 or float64) give the reference's gradient of the step, along a fixed
       cotangent, with respect to the state and a learnable ``dt``.

    Agreement is to ``ONE_STEP_RTOL`` in float64 and to :func:`~solvers.testing.protocol.float32_allowance` rounding
    units of the state's dtype otherwise, relative to the states' sizes and ``|dt| max|f|`` (a gradient relative to
    the cotangent's and the reference gradient's sizes; a ``dt`` gradient to ``sum|r| max|f|``). ``fields``, if
    given, is called as ``fields(width, seed)`` and returns a field ``f(t, x)`` for states ``(batch, tokens, width)``
    (an ``nn.Module`` is evaluated in float64 and ``eval()`` mode): your model's own attention and FFN join the drawn
    field kinds (``"given"``). Block steppers are left to :func:`~solvers.testing.check_layer`. Returns the largest
    defect (relative)."""
    from .._splitting import Block

    stepper = _instance(stepper)
    name, pristine = _name(stepper), _copy(stepper)
    fixed_width = stepper_width(stepper)
    width = dim if dim is not None else fixed_width
    allowed_units = float32_allowance(stepper)
    worst = [0.0]

    def judge(
        defect: float, dtype: torch.dtype, gain: float, what: str, where: str, floor: float = 0.0, times: float = 0.0
    ) -> None:
        gain = max(1.0, gain)
        if dtype == torch.float64:
            unit, units = 1.0, th.ONE_STEP_RTOL
            rule = f"ONE_STEP_RTOL is {th.ONE_STEP_RTOL:g}"
        else:
            unit, units = _eps(dtype), allowed_units
            rule = f"its arithmetic allows {allowed_units:.3g} {str(dtype).removeprefix('torch.')} rounding units"
        if gain > 1.0:
            rule += f", times {gain:.3g}, how much this step amplifies rounding"
        allowed = units * unit * gain
        if dtype != torch.float64 and allowed > th.UNRESOLVED and floor == 0.0:
            return  # the dtype cannot resolve this step: any result would pass, so none is judged
        if floor > allowed:
            allowed, rule = floor, f"difference quotients resolve {floor:g}"
        if times > 0.0:  # a far start: its stage times are held only to float64's rounding there
            allowed += times
            rule += f", plus {times:.3g}, what rounding the far stage times moves it"
        worst[0] = max(worst[0], defect)
        if not defect <= allowed:
            size = f"{defect / unit:.3g} rounding units" if unit != 1.0 else f"{defect:.3g} (relative)"
            raise AssertionError(f"{name} (order {stepper.order}): {what} by {size} {where} ({rule}).")

    def claim(drawn: _InContext) -> None:
        context = drawn.context
        if context.field == "given" and fields is None:
            return
        inst, tiling = _tiling(drawn.instance, context, fixed_width)
        # the reference runs from the instance's own start at its own magnitude; a far start runs the field shifted
        # in time and a scale runs state and field scaled, so that the context's run is the reference's
        t_ref = inst.t0
        t0 = t_ref if context.t0 is None else context.t0
        shift, scale = t0 - t_ref, context.scale
        low = inst.steppers(pristine)[0]
        problem = inst.problem(low)
        if isinstance(problem.field_for(low), Block):
            return
        inner = _exact(problem, context, inst.seed, fields, low)

        def exact(s, x):  # the reference's field: a plain function that holds nothing a scheme could inspect
            return inner(s, x)

        ran = _in_dtype(low, context.dtype)
        high = _float64(_copy(ran))
        dts = inst.dts()[:4]
        small = problem.initial(low)  # one tile
        whole = tiling.tiles > 1
        if whole:  # the context's size: independent tiles, each a state of the instance's shape
            g = generator(inst.seed)
            parts = [torch.randn(tiling.shape, generator=g, dtype=torch.float64) * problem.scale for _ in _parts(small)]
            y0 = PhaseState(*parts) if isinstance(small, PhaseState) else parts[0]
            field = _Tiled(inner, tiling)
        else:
            y0, field = small, inner
        if shift != 0.0:
            field = _Shifted(field, shift)
        if scale != 1.0:
            field = _Scaled(field, scale)
            y0 = PhaseState(*(u * scale for u in y0)) if isinstance(y0, PhaseState) else y0 * scale
        which = tiling.picked(inst.seed) if whole else [0]
        picked = len(which) * tiling.base[0]
        like = _reshaped(small, picked)  # the form of the picked tiles stacked

        def tiles_of(flat: Tensor) -> Tensor:
            return tiling.take(flat, y0, which) if whole else flat

        got = _unscaled(_run(ran, field, y0, t0, dts, context, inst.seed), scale)
        start0 = _unflat(tiles_of(got.starts[0]), like)
        ref = _run(_copy(high), exact, start0, t_ref, dts, REFERENCE, inst.seed)
        for i, (n, m) in enumerate(zip(got.counts, ref.counts)):
            if n != m:
                raise AssertionError(
                    f"{name} declares evals_per_step = {stepper.evals_per_step}"
                    f"{' and fsal' if stepper.fsal else ''} but evaluated the field {n} times in step {i} in context "
                    f"({context}), {m} times in the reference context ({REFERENCE}), one field for all steps."
                )
        t = t_ref
        for i, dt in enumerate(dts):
            far = t + shift  # where the context's step starts
            slack = 1e-12 * max(1.0, abs(far), abs(dt))
            slack += 4 * _eps(context.dtype) * (abs(far) + abs(dt))  # times from a parameter of the state's dtype
            for a, b in zip(got.times[i], ref.times[i]):
                if abs((a - shift) - b) > slack:
                    raise AssertionError(
                        f"{name} evaluated the field at t = {_show(got.times[i])} in step {i} in context ({context}) "
                        f"but at t = {_show([u + shift for u in ref.times[i]])} in the reference context shifted to "
                        f"its start, from t = {far:.6g}, dt = {dt:.4g}."
                    )
            start = tiles_of(got.starts[i])
            y = _unflat(start, like)
            fresh = tiles_of(got.fresh[i])
            peak = _Peak(exact)
            counted, _ = _field(peak, "function")
            with torch.no_grad():
                reference = _fresh_step(_copy(high), counted, t, y, dt)
                rate = exact(t, y.x if isinstance(y, PhaseState) else y)
                back = None
                if stepper.reversible:
                    back = _flat(_copy(high).inverse(counted, t, _unflat(fresh, like), dt))
            reference = _flat(reference)
            reached = max(peak.largest, float(reference.abs().max()), float(start.abs().max()))
            if context.dtype != torch.float64 and not reached <= torch.finfo(context.dtype).max / 16:
                reject()  # the step's own stages leave the dtype's range: it cannot hold this step
            size = max(float(start.abs().max()), float(reference.abs().max()), abs(dt) * float(rate.abs().max()))
            size = max(size, 1e-300)
            gain = amplification(_copy(high), exact, t, y, dt, reference, _eps(context.dtype), inst.seed + i)
            if not gain <= th.BLOWN_UP:  # outside the scheme's stability region: rounding there proves nothing
                reject()
            times = 0.0
            if shift != 0.0:
                moved = _time_rounding(_copy(high), exact, t, y, dt, far, inst.seed + i)
                times = th.MODELLED_ROUNDING * float((_flat(moved) - reference).abs().max()) / size
            shown = f" (tiles {which} of {tiling.tiles} of {problem.name})" if whole else f", on {problem.name}"
            started = f"from t = {far:.4g} (the reference from t = {t:.4g})" if shift != 0.0 else f"from t = {t:.4g}"
            where = f"at step {i} {started}, dt = {dt:.4g}{shown}, in context ({context})"
            judge(
                float((fresh - reference).abs().max()) / size,
                context.dtype,
                gain,
                "its step differs from the reference context's step from the same state",
                where + ": the scheme takes another path in that context",
                times=times,
            )
            if back is not None:
                after = _unflat(fresh, like)
                gain_back = amplification(
                    _copy(high), exact, t, after, dt, back, _eps(context.dtype), inst.seed + i, inverse=True
                )
                judge(
                    float((tiles_of(got.inverses[i]) - back).abs().max()) / size,
                    context.dtype,
                    gain_back,
                    "its inverse differs from the reference context's inverse of the same state",
                    where,
                    times=times,
                )
            own = float((ref.carried[i] - ref.fresh[i]).abs().max()) / size  # in the reference context itself
            if not stepper.multistep and own <= th.ONE_STEP_RTOL * max(1.0, gain):  # else check_one_step says it
                judge(
                    float((tiles_of(got.carried[i]) - fresh).abs().max()) / size,
                    context.dtype,
                    gain,
                    "its step from the carried state differs from a step from a fresh init",
                    where + " (a value carried between steps is kept in another precision or path there)",
                )
            if got.grads[i] is not None:
                on_y, on_dt = got.grads[i]
                learnable = on_dt is not None and not whole  # a dt gradient sums over every tile
                r_whole = _cotangent(got.fresh[i].numel(), inst.seed + i)
                ref_y, r, _ = _reference_grads(_copy(high), exact, y, t, dt, False, tiles_of(r_whole))
                on_y = tiles_of(on_y)
                scale = max(float(ref_y.abs().max()), float(r.abs().max()))
                eps = _eps(context.dtype)  # how much modelled rounding moves the gradient (the backward pass too)
                noisy, _, _ = _reference_grads(
                    _copy(high), exact, y, t, dt, False, tiles_of(r_whole), rounding=eps, seed=inst.seed + i
                )
                gain_grad = float((noisy - ref_y).abs().max()) / (eps * scale)
                times_grad = 0.0
                if shift != 0.0:
                    late = _time_rounding_field(exact, far, dt, inst.seed + i)
                    wobbled, _, _ = _reference_grads(_copy(high), late, y, t, dt, False, tiles_of(r_whole))
                    times_grad = th.MODELLED_ROUNDING * float((wobbled - ref_y).abs().max()) / scale
                judge(
                    float((on_y - ref_y).abs().max()) / scale,
                    context.dtype,
                    max(gain, gain_grad),
                    "the gradient of its step with respect to the state differs from the reference context's",
                    where + " (autograd sees another computation there)",
                    times=times_grad,
                )
                if learnable:  # against difference quotients in dt: the scheme's own dt gradient vouches nothing
                    ref_dt, resolved = _dt_quotient(_copy(high), exact, y, t, dt, r)
                    natural = max(float(r.abs().sum()) * float(rate.abs().max()), abs(ref_dt), 1e-300)
                    judge(
                        abs(on_dt - ref_dt) / natural,
                        context.dtype,
                        gain,
                        "the gradient of its step with respect to a learnable dt differs from difference quotients "
                        "in dt",
                        where + " (a learnable step size's gradient is lost or changed there)",
                        floor=max(th.GRADIENT_RTOL, 10 * resolved / natural),
                    )
            t = t + dt

    fixed_instance = Instance(
        seed=0,
        batch=2,
        tokens=3,
        width=width or 3,
        magnitude=1.0,
        dt=0.4,
        rate=0.5,
        t0=0.3,
        steps=3,
        moved=0.5,
        moved_seed=0,
        layers=1,
    )
    given = (Context(torch.float32, "enable_grad", "given"),) if fields is not None else ()
    fixed = [_InContext(fixed_instance, c) for c in (*CONTEXTS, *given)]
    strategy = st.builds(
        _InContext, instances(pristine, width, max_steps=4, large=False), contexts(given=fields is not None)
    )
    check_drawn(strategy, claim, examples, fixed=fixed)
    return worst[0]


def _show(times: list[float]) -> str:
    return "[" + ", ".join(f"{u:.10g}" for u in times) + "]"


def _unscaled(run: _Run, scale: float) -> _Run:
    """A run of the state scaled by ``scale`` (a power of two) as the unscaled run: its states divided by it (exact),
    the gradient with respect to the state unchanged, a ``dt`` gradient divided by it."""
    if scale == 1.0:
        return run
    grads = [None if g is None else (g[0], None if g[1] is None else g[1] / scale) for g in run.grads]
    inverses = [None if u is None else u / scale for u in run.inverses]
    return _Run(
        run.counts,
        run.times,
        [u / scale for u in run.starts],
        [u / scale for u in run.fresh],
        [u / scale for u in run.carried],
        inverses,
        grads,
    )


def _time_rounding_field(exact: Callable, far: float, dt: float, seed: int) -> Callable:
    """``exact`` with every evaluation's time off by up to float64's rounding of times near ``far`` (uniform, from
    ``seed``): how a run started far from ``t = 0`` holds its stage times."""
    g = generator(seed)
    unit = th.EPS * (abs(far) + abs(dt))

    def late(s, x):
        return exact(s + unit * (2 * float(torch.rand((), generator=g, dtype=torch.float64)) - 1), x)

    return late


def _time_rounding(stepper: AbstractStepper, exact: Callable, t: float, y: Any, dt: float, far: float, seed: int):
    """The reference step from ``y`` at ``t`` with its stage times rounded as near ``far``
    (:func:`_time_rounding_field`): a far start's honest difference from the reference is this step's from the exact
    one, times ``MODELLED_ROUNDING``."""
    counted, _ = _field(_time_rounding_field(exact, far, dt, seed), "function")
    with torch.no_grad():
        return _fresh_step(stepper, counted, t, y, dt)


def _dt_quotient(stepper, exact, y, t, dt: float, r: Tensor) -> tuple[float, float]:
    """``r · (step(dt + h) - step(dt - h)) / 2h`` in float64 at ``h = 10⁻ᵏ |dt|``, ``k = 1 … 7``, where two
    neighbouring quotients agree best (:func:`~solvers.testing.protocol.best_quotient`), and their spread: the
    derivative of a step in its size, independent of how the scheme handles a ``dt`` that requires grad, and how far
    it can be trusted (rounding dominates a small ``h`` where the field is small beside the state, truncation a large
    one where a composition's sub-steps are large)."""
    counted, _ = _field(exact, "function")

    def quotient(k: float) -> float:
        h = k * abs(dt)
        with torch.no_grad():
            up = _flat(_fresh_step(_copy(stepper), counted, t, y, dt + h))
            down = _flat(_fresh_step(_copy(stepper), counted, t, y, dt - h))
        return float((r * (up - down)).sum()) / (2 * h)

    return best_quotient(quotient, tuple(10.0**-k for k in range(7, 0, -1)))
