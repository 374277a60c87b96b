"""The execution context as part of what is drawn: a scheme steps the same in every context a model runs it in.

A model runs a step in float32 with autograd on (training), under ``torch.inference_mode()`` (generation), under bf16
or fp16 autocast, in half precision after ``.half()``, with one thread or several, in deterministic-algorithms mode,
under ``torch.jit.trace`` or a ``torch.func`` transform (each sample under ``vmap``, a ``jvp``, a functional ``grad``),
on an ``nn.Module`` field with trainable weights built from attention and an FFN, on states of thousands to millions of
entries that are views (transposed, sliced, channels-last, expanded over the batch or broadcast over the tokens with
stride 0), of rank 1 to 5 with several heads, a single token ``(batch, 1, width)`` as cached generation steps one, at
times up to depth times ``dt``, with ``t`` and ``dt`` as floats or 0-d tensors (a learnable step size requires grad),
with a state that requires grad stepped under ``no_grad``, on fields in training or in eval mode. The other checks run
float64, autograd off, a plain function on small contiguous states. A scheme that branches on any of these passes them
and is wrong where it is used. Here every drawn instance is run in a drawn :class:`Context` and compared with the
:data:`REFERENCE` context (float64, no grad, a plain function, contiguous, floats, one thread) from the same state: its
values, and in training its gradients with respect to the state, a learnable ``dt``, the field's weights and the
scheme's own parameters.

What a scheme may branch on is also what the reference must not share. A context's far start time is therefore
compared with the reference at the instance's own start, the context's field shifted in time to match (a step
commutes with a shift of time); and a context's ``scale`` (a power of two) runs the state and the field scaled by it,
compared with the reference at the instance's own magnitude (a step commutes with scaling the state and the field;
by a power of two that is exact in floating point). A scheme that takes another path far from ``t = 0``, or for
large or small states, is compared with its own step where the other checks vouch for it. That holds where the
scheme's own limit commutes with the shift or the scaling (the field itself, a momentum, a fixed friction): a scheme
whose limit has a friction of its own depending on the absolute time (``r / t``) or saturating in the state
(``c tanh v``) has a step that does not, and is compared with the reference where the context runs it, its order
measured there (:func:`_held_there`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import Tensor, nn

from .._base import AbstractStepper, PhaseState, transforms_active
from . import thresholds as th
from ._common import (
    RoundingEveryOperation,
    Untouched,
    _copy,
    _float64,
    _fresh_step,
    _instance,
    _name,
    _Scaled,
    _tangent_of,
    each,
    field_size,
    fields_of,
    is_block,
    lipschitz,
    placed,
    rounded_field,
    rounding_model,
)
from ._drawn import check_drawn, reject
from .problems import _cos, generator, stepper_width, weighted
from .protocol import (
    amplification,
    best_quotient,
    float32_allowance,
    own_rounding,
    rounds_its_own_values,
    time_held_step,
    unstated_coefficients,
)
from .references import _flat, _unflat
from .strategies import Instance, instances

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
"""The state dtypes drawn: float64, float32 (training), float16 and bfloat16 (a model cast with ``.half()``; the
stepper is cast with it)."""
MODES = ("no_grad", "enable_grad", "inference_mode", "no_grad, y requires grad")
"""Autograd off, on with a state that requires grad (training), ``torch.inference_mode()`` (generation), and off with
a state that requires grad (a training model's forward taken under ``no_grad`` for evaluation)."""
FIELDS = ("function", "module", "eval module", "attention", "given")
"""A plain function, the same field as an ``nn.Module`` with trainable weights (in training mode, as a model trains)
and in eval mode (as a model generates), a field of softmax attention and a GELU FFN on LayerNorm'd states
(:class:`AttentionFFN`, an ``nn.Module`` with trainable parameters, through ``scaled_dot_product_attention``; for a
block stepper its attention and its FFN), and a field you give (``check_contexts(..., fields=...)``, e.g. your model's
own attention and FFN)."""
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "broadcast", "channels_last")
"""How the state is laid out: contiguous, a transposed view (the same values, other strides), every other entry of a
wider tensor, a sample expanded over the batch (stride 0), a token broadcast over the tokens (stride 0; a row state's
first channel over its channels), and a channels-last copy of a 4-D or 5-D state (one is made 4-D for it)."""
TIMES = ("float", "tensor", "learnable dt")
"""``t0`` and ``dt`` as Python floats, as 0-d float64 tensors, and with ``dt`` a 0-d tensor that requires grad."""
TRANSFORMS = ("none", "vmap", "jvp", "grad", "trace", "compile")
"""The step as it is called: directly; under ``torch.func.vmap`` over the batch (each sample alone: a row state is
rank 1); under ``torch.func.jvp`` (its tangent along a drawn direction against the reference gradient); under
``torch.func.grad`` (the gradient along a cotangent against the reference's); traced by ``torch.jit.trace`` and the
trace run; compiled by ``torch.compile`` (Dynamo, the eager backend: a model trained with ``train.compile`` runs its
steps as Dynamo captures them, and ``torch.compiler.is_compiling()`` holds there; on the fixed instance only, a
capture costing seconds)."""
AUTOCASTS = (torch.bfloat16, torch.float16)
"""The autocast dtypes drawn (on the CPU; a GPU's autocast is out of reach on a CPU machine)."""
THREADS = (1, 2, 3, 4)
"""The intra-op thread counts drawn (a kernel that splits work by thread count rounds otherwise)."""
SCALES = th.CONTEXT_SCALES
"""The powers of two the state and the field are scaled by range between these (``CONTEXT_SCALES``)."""

_EPS = {torch.float64: th.EPS, torch.float32: th.EPS32}


def _eps(dtype: torch.dtype) -> float:
    return _EPS.get(dtype) or torch.finfo(dtype).eps


@dataclass(frozen=True)
class Context:
    """Where a step runs: its state ``dtype``; its grad ``mode`` (:data:`MODES`); its ``field`` (:data:`FIELDS`); its
    ``autocast`` (``False``, ``True`` for bf16, or the dtype, :data:`AUTOCASTS`); the intra-op ``threads``; the state's
    ``layout`` (:data:`LAYOUTS`); ``rank4`` (the state viewed with a head dimension, ``(batch, 1, tokens, width)``);
    ``token`` (a state of rows viewed as one token each, ``(batch, 1, width)``, as cached generation steps a new token;
    the reference steps the rows); ``heads``, dimensions inserted after the batch (``(4,)``: four heads, ``(2, 2)``: a
    rank-5 state; the instance's batch grows by their product, each a sample of its own); how ``time`` is handed over
    (:data:`TIMES`); a start time ``t0`` replacing the instance's (``None``: the instance's; the field is shifted in
    time so that the run is the instance's, and the reference runs from the instance's own start); a ``size``,
    ``(tokens, width)`` or ``"large"`` (at least ``CONTEXT_LARGE_STATE`` entries), replacing the instance's shape
    (``None``: the instance's; a per-channel stepper keeps its width); a ``scale``, a power of two the state and the
    field are scaled by (``m f(t, x / m)``; the reference runs unscaled, and the run is compared after dividing by it);
    a step size ``dt`` replacing the instance's (``None``: the instance's); ``deterministic``, under
    ``torch.use_deterministic_algorithms(True)``; and the ``transform`` the step is called under
    (:data:`TRANSFORMS`)."""

    dtype: torch.dtype = torch.float64
    mode: str = "no_grad"
    field: str = "function"
    autocast: bool | torch.dtype = False
    threads: int = 1
    layout: str = "contiguous"
    rank4: bool = False
    token: bool = False
    time: str = "float"
    t0: float | None = None
    size: tuple[int, int, int] | str | None = None
    scale: float = 1.0
    heads: tuple[int, ...] = ()
    dt: float | None = None
    deterministic: bool = False
    transform: str = "none"

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The autocast dtype, or ``None`` for none."""
        if self.autocast is True:
            return torch.bfloat16
        return self.autocast if isinstance(self.autocast, torch.dtype) else None

    @property
    def training(self) -> bool:
        """Whether gradients are taken in this context (autograd on, float32 or float64, called directly)."""
        return self.mode == "enable_grad" and self.dtype in (torch.float32, torch.float64) and self.transform == "none"

    def __str__(self) -> str:
        kinds = {
            "function": "a plain function",
            "module": "an nn.Module field",
            "eval module": "an nn.Module field in eval mode",
            "attention": "an attention and FFN nn.Module field",
            "given": "the field given",
        }
        parts = [str(self.dtype).removeprefix("torch."), self.mode, kinds[self.field]]
        if self.autocast_dtype is not None:
            parts.append(f"under {'bf16' if self.autocast_dtype == torch.bfloat16 else 'fp16'} autocast")
        if self.threads != 1:
            parts.append(f"{self.threads} threads")
        if self.deterministic:
            parts.append("deterministic algorithms")
        if self.transform != "none":
            special = {"trace": "under torch.jit.trace", "compile": "under torch.compile"}
            parts.append(special.get(self.transform, f"under torch.func.{self.transform}"))
        if self.layout != "contiguous":
            parts.append(f"a {self.layout} view" if self.layout != "channels_last" else "a channels-last state")
        if self.token:
            parts.append("rows as single tokens (batch, 1, width)")
        if self.rank4:
            parts.append("4-D states")
        if self.heads:
            parts.append(f"heads {self.heads}")
        if self.time != "float":
            parts.append("t0 and dt as 0-d tensors" if self.time == "tensor" else "dt a 0-d tensor requiring grad")
        if self.t0 is not None:
            parts.append(f"from t = {self.t0:.6g}")
        if self.dt is not None:
            parts.append(f"dt = {self.dt:g}")
        if self.size == "large":
            parts.append(f"at least {th.CONTEXT_LARGE_STATE} entries")
        elif self.size is not None:
            parts.append(f"states ({self.size[0]}, {self.size[1]}, {self.size[2]})")
        if self.scale != 1.0:
            parts.append(f"state and field scaled by 2^{round(math.log2(self.scale))}")
        return ", ".join(parts)

    def grad(self) -> AbstractContextManager:
        return {
            "no_grad": torch.no_grad,
            "enable_grad": torch.enable_grad,
            "inference_mode": torch.inference_mode,
            "no_grad, y requires grad": torch.no_grad,
        }[self.mode]()

    def entered(self) -> ExitStack:
        """Enter the grad mode, autocast, thread count and deterministic mode; leaving restores them."""
        stack = ExitStack()
        stack.enter_context(self.grad())
        cast = self.autocast_dtype
        stack.enter_context(torch.autocast("cpu", dtype=cast) if cast is not None else nullcontext())
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        stack.callback(torch.set_num_threads, threads)
        if self.deterministic:
            before, warn = (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            )
            torch.use_deterministic_algorithms(True)
            stack.callback(torch.use_deterministic_algorithms, before, warn_only=warn)
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
    Context(torch.float32, "enable_grad", "module", autocast=torch.float16),
    Context(torch.float32, "inference_mode", "module", layout="expanded"),
    Context(torch.float64, "inference_mode", "attention", layout="sliced"),
    Context(torch.float32, "enable_grad", "attention", scale=SCALES[1]),
    Context(torch.float64, "enable_grad", "attention"),
    Context(torch.float64, "no_grad", "function", rank4=True, t0=500.0),
    Context(torch.float64, "enable_grad", "function", token=True),
    Context(torch.float32, "inference_mode", "module", token=True, layout="transposed"),
    Context(torch.float32, "no_grad", "eval module", time="tensor", t0=-64.0),
    Context(torch.float64, "no_grad", "function", t0=40.0, scale=SCALES[1]),
    Context(torch.float64, "no_grad", "function", t0=-10000.0, dt=2.5),
    Context(torch.float32, "no_grad, y requires grad", "module", threads=3, layout="broadcast"),
    Context(torch.float64, "no_grad", "module", heads=(4,), layout="channels_last", deterministic=True),
    Context(torch.float32, "enable_grad", "module", heads=(2, 2), threads=4),
    Context(torch.float64, "no_grad", "function", transform="vmap"),
    Context(torch.float32, "no_grad", "module", transform="vmap", heads=(2,)),
    Context(torch.float64, "enable_grad", "module", transform="jvp"),
    Context(torch.float64, "no_grad", "function", transform="grad", time="tensor"),
    Context(torch.float32, "no_grad", "module", transform="trace"),
    Context(torch.float32, "no_grad", "module", transform="compile"),
    Context(torch.float16),
    Context(torch.bfloat16, "enable_grad", "module"),
    Context(torch.float32, "enable_grad", "module", size=(2, 197, 192)),
    Context(torch.float32, "enable_grad", "module", size=(2, 64, 768)),
    Context(torch.float32, "no_grad", "attention", size=(64, 17, 48)),
    Context(torch.float64, "no_grad", "function", size=(128, 17, 64)),
    Context(torch.float32, "no_grad", "module", size="large"),
)
"""The contexts every check runs first, on a fixed instance: each value of every aspect at least once, and float64 and
float32 with each grad mode (half precision; bf16 and fp16 autocast; each field kind, with trainable weights; two,
three and four threads; deterministic algorithms; each layout; 4-D states, several heads and rank 5; rows as single
tokens (these on an instance of rows); ``vmap`` (rank-1 rows), ``jvp``, functional ``grad`` and ``jit.trace``; tensor
and learnable times; start times up to 10,000 on either side and a step of 2.5; states scaled up and down; a state
requiring grad under ``no_grad``; a DeiT-Tiny sequence, a GPT-2 width, the digits ViT's and Fashion-MNIST's states
and a large state). Then instances are drawn with a context each (:func:`contexts`), every transformer size among
them."""


def contexts(given: bool = False):
    """Strategy: a :class:`Context` with every aspect drawn (the ``given`` field kind only when a field is given; a
    transformer size in one draw in four; see :func:`_drawable`)."""
    low, high = (math.log10(t) for t in th.CONTEXT_T0_RANGE)
    far = st.builds(lambda e, sign: sign * 10.0**e, st.floats(low, high), st.sampled_from([1.0, -1.0]))
    steps = st.builds(lambda e, sign: sign * 10.0**e, st.floats(math.log10(1.5), math.log10(th.CONTEXT_MAX_DT)),
                      st.sampled_from([1.0, -1.0]))  # fmt: skip
    return st.builds(
        Context,
        dtype=st.sampled_from(DTYPES),
        mode=st.sampled_from(MODES),
        field=st.sampled_from(FIELDS if given else FIELDS[:-1]),
        autocast=st.one_of(st.just(False), st.sampled_from(AUTOCASTS)),
        threads=st.sampled_from(THREADS),
        layout=st.sampled_from(LAYOUTS),
        rank4=st.booleans(),
        token=st.booleans(),
        time=st.sampled_from(TIMES),
        t0=st.one_of(st.none(), far),
        size=st.integers(0, 3).flatmap(
            lambda k: st.sampled_from([*th.CONTEXT_SIZES, "large"]) if k == 3 else st.none()
        ),
        scale=st.one_of(st.just(1.0), st.sampled_from(SCALES), st.integers(*_exponents()).map(lambda k: 2.0**k)),
        heads=st.sampled_from([(), (), (3,), (2, 2)]),
        dt=st.one_of(st.none(), st.none(), steps),
        deterministic=st.booleans(),
        transform=st.sampled_from(TRANSFORMS[:-1]),  # compile: on the fixed instance (a capture costs seconds)
    ).map(_drawable)


def _exponents() -> tuple[int, int]:
    low, high = (round(math.log2(s)) for s in SCALES)
    return low, high


def _drawable(context: Context) -> Context:
    """A drawn context as a model runs: no autocast over half-precision states (a model cast to half does not run
    under it), nor a scale (half precision keeps its magnitudes in ``HALF_MAGNITUDES``); one thread on a large state
    (a large state's every op at several threads on a busy machine costs seconds; the fixed contexts run threads and
    the sizes apart); a transform on the instance's own shape (no tiles), outside ``inference_mode``, and ``jvp`` on
    a state with no stride-0 layout (a tangent cannot be written into one)."""
    if context.dtype in (torch.float16, torch.bfloat16):
        context = replace(context, autocast=False, scale=1.0)
    if context.size is not None:
        context = replace(context, threads=1)
    if context.transform != "none":
        context = replace(context, size=None, mode="no_grad" if context.mode == "inference_mode" else context.mode)
    if context.transform == "jvp" and context.layout in ("expanded", "broadcast"):
        context = replace(context, layout="contiguous")  # a tangent cannot be written into a stride-0 state
    return context


# -- fields ----------------------------------------------------------------------------------------------------------


def _weight(g: torch.Generator, rows: int, cols: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(rows, cols, generator=g, dtype=torch.float64) / cols**0.5)


def _modulated(t, out: Tensor) -> Tensor:
    return (1 + 0.5 * _cos(2 * t + 0.7)) * out


def _as_tokens(x: Tensor) -> tuple[Tensor, bool]:
    rows = x.dim() == 2
    return (x.unsqueeze(-2) if rows else x), rows


class Attention(nn.Module):
    """``(1 + ½ cos(2t + 0.7)) Attn(LN(X))`` per sample, float64, trainable weights from ``g``: softmax
    self-attention over the tokens (two heads where the width is even and at least 4) through
    ``scaled_dot_product_attention``. States ``(batch, width)`` are one token each."""

    def __init__(self, width: int, g: torch.Generator):
        super().__init__()
        self.width, self.heads = width, 2 if width % 2 == 0 and width >= 4 else 1
        self.qkv, self.out = _weight(g, 3 * width, width), _weight(g, width, width)

    def forward(self, t, x: Tensor) -> Tensor:
        h, rows = _as_tokens(x)
        h = F.layer_norm(h, (self.width,))
        batch, tokens = h.shape[0], h.shape[-2]
        q, k, v = (
            u.reshape(batch, tokens, self.heads, -1).transpose(1, 2) for u in F.linear(h, self.qkv).chunk(3, dim=-1)
        )
        if transforms_active():  # forward-mode AD through SDPA is not implemented on the CPU: the plain formula
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (B, H, N, N)
            attended = (weights @ v).transpose(1, 2).reshape(batch, tokens, self.width)
        else:
            attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, self.width)
        out = _modulated(t, F.linear(attended, self.out))
        return out.squeeze(-2) if rows else out


class FFN(nn.Module):
    """``(1 + ½ cos(2t + 0.7)) FFN(LN(X))`` per token, float64, trainable weights from ``g``: a GELU MLP of hidden
    width ``4 * width``."""

    def __init__(self, width: int, g: torch.Generator):
        super().__init__()
        self.width = width
        self.up, self.down = _weight(g, 4 * width, width), _weight(g, width, 4 * width)

    def forward(self, t, x: Tensor) -> Tensor:
        h = F.layer_norm(x, (self.width,))
        return _modulated(t, F.linear(F.gelu(F.linear(h, self.up)), self.down))


class AttentionFFN(nn.Module):
    """``f(t, X) = Attention(t, X) + FFN(t, X)`` (:class:`Attention`, :class:`FFN`), float64, trainable weights from
    ``seed``: a transformer layer's two sublayers as one field (for a block stepper, :meth:`block` gives them as a
    :class:`~solvers.Block`)."""

    def __init__(self, width: int, seed: int):
        super().__init__()
        g = generator(seed)
        self.attention, self.ffn = Attention(width, g), FFN(width, g)

    def forward(self, t, x: Tensor) -> Tensor:
        return self.attention(t, x) + self.ffn(t, x)

    def block(self) -> Any:
        from .._splitting import Block

        return Block(self.attention, self.ffn)


class _Peak:
    """A field that records the largest magnitude it (and the other fields sharing its ``seen`` list) is evaluated at
    or returns (a step's stages)."""

    def __init__(self, field: Callable, seen: list[float]):
        self.field, self.seen = field, seen

    def __call__(self, t, x):
        f = self.field(t, x)
        self.seen[0] = max(self.seen[0], float(x.detach().abs().max()), float(f.detach().abs().max()))
        return f

    def joint_at(self, t, x, v):
        f, tangent = _tangent_of(self.field, t, x, v)
        self.seen[0] = max(self.seen[0], float(x.detach().abs().max()), float(f.detach().abs().max()))
        return f, tangent


class _Counted:
    """A field that counts its evaluations and records their times, evaluating in float64 on states of the instance's
    own form (a view with head dimensions, or one sample under ``vmap``, is reshaped to samples of ``shape[1:]``) and
    rounding the result back to the state's dtype (so the field is exact and the step's own arithmetic is what a
    low-precision run measures)."""

    def __init__(self, field: Callable, shape: torch.Size | None = None):
        self.field, self.shape, self.calls, self.times = field, shape, 0, []

    def __call__(self, t, x):
        self.calls += 1
        self.times.append(float(t.detach()) if isinstance(t, Tensor) else float(t))
        z = x.to(torch.float64)
        if self.shape is None:
            return self.field(t, z).to(x.dtype)
        return self.field(t, z.reshape(-1, *self.shape[1:])).reshape(x.shape).to(x.dtype)

    def joint_at(self, t, x, v):
        self.calls += 1
        self.times.append(float(t.detach()) if isinstance(t, Tensor) else float(t))
        z, w = x.to(torch.float64), v.to(torch.float64)
        if self.shape is not None:
            z, w = z.reshape(-1, *self.shape[1:]), w.reshape(-1, *self.shape[1:])
        f, tangent = _tangent_of(self.field, t, z, w)
        return f.reshape(x.shape).to(x.dtype), tangent.reshape(x.shape).to(x.dtype)


def _module_in(field: Any) -> nn.Module | None:
    """The ``nn.Module`` a field wrapped by the kit (scaled, shifted, tiled, counted) evaluates, if any."""
    while not isinstance(field, nn.Module) and hasattr(field, "field"):
        field = field.field
    return field if isinstance(field, nn.Module) else None


class _ModuleField(nn.Module):
    """The same field as an ``nn.Module`` (every model's field is one), holding the module it evaluates (its weights
    are the module's parameters, as a model's are)."""

    def __init__(self, counted: _Counted):
        super().__init__()
        self.counted = counted
        self.net = _module_in(counted)

    def forward(self, t, x):
        return self.counted(t, x)

    def joint_at(self, t, x, v):
        return self.counted.joint_at(t, x, v)


class _Counts:
    """The counters of a field's evaluations (a block's attention and FFN each)."""

    def __init__(self) -> None:
        self.counters: list[_Counted] = []

    def calls(self) -> tuple[int, ...]:
        return tuple(c.calls for c in self.counters)

    @property
    def times(self) -> list[float]:
        """The first field's (the attention's) evaluation times."""
        return self.counters[0].times


def _field(exact: Any, kind: str, shape: torch.Size | None = None) -> tuple[_Counts, Any]:
    """``exact`` (a field, or a :class:`~solvers.Block` of them) counted, as the context's field ``kind`` gives it: a
    plain function, or an ``nn.Module`` in training or eval mode."""
    counts = _Counts()

    def made(f: Callable) -> Any:
        counted = _Counted(f, shape)
        counts.counters.append(counted)
        if kind == "function":
            return counted
        module = _ModuleField(counted)
        return module.eval() if kind == "eval module" else module

    return counts, each(exact, made)


def _weights(field: Any) -> list[Tensor]:
    """The trainable weights of the modules a field (a block's fields) evaluates, each once."""
    out, seen = [], set()
    for f in fields_of(field):
        module = _module_in(f)
        for p in module.parameters() if module is not None else ():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


class _Shifted:
    """``f(t - shift, x)``: the field of a run started ``shift`` later, so that it is the same run."""

    def __init__(self, field: Callable, shift: float):
        self.field, self.shift = field, shift

    def __call__(self, t, x):
        return self.field(t - self.shift, x)

    def joint_at(self, t, x, v):
        return _tangent_of(self.field, t - self.shift, x, v)


def _exact(problem, context: Context, seed: int, given: Callable | None, stepper: AbstractStepper):
    """The float64 field of this context on the instance's own shape, with trainable weights: the problem's
    (:func:`~solvers.testing.problems.weighted`), or an attention and FFN field (or the one given) at the problem's
    magnitude; for a block stepper a :class:`~solvers.Block` (the given field as its attention, with the problem's FFN,
    where it is not one)."""
    from .._splitting import Block

    base = problem.field_for(stepper)
    width = problem.x0.shape[-1]
    if context.field in ("function", "module", "eval module"):
        return weighted(base, width, seed, problem.scale)
    if context.field == "attention":
        net = AttentionFFN(width, seed)
        built = net.block() if isinstance(base, Block) else net
    else:
        built = given(width, seed)
        if isinstance(built, nn.Module):
            built = built.to(torch.float64).eval()
        if isinstance(base, Block) and not isinstance(built, Block):  # the given field as the attention
            return Block(_Scaled(_AsTokens(built), problem.scale), weighted(base.ffn, width, seed, problem.scale))
    return each(built, lambda f: _Scaled(_AsTokens(f), problem.scale))


class _AsTokens:
    """A field given for states ``(batch, tokens, width)``, on rows ``(batch, width)`` as one token each."""

    def __init__(self, field: Callable):
        self.field = field

    def __call__(self, t, x):
        return self.field(t, x.unsqueeze(-2)).squeeze(-2) if x.dim() == 2 else self.field(t, x)

    def joint_at(self, t, x, v):
        if x.dim() != 2:
            return _tangent_of(self.field, t, x, v)
        f, tangent = _tangent_of(self.field, t, x.unsqueeze(-2), v.unsqueeze(-2))
        return f.squeeze(-2), tangent.squeeze(-2)


# -- states ----------------------------------------------------------------------------------------------------------


def _laid_out(u: Tensor, layout: str, rank4: bool, heads: tuple[int, ...] = (), token: bool = False) -> Tensor:
    """``u`` (a leaf) as the context lays it out: rows as one token each (``token``), its batch split into ``heads``
    dimensions after it (each a sample of its own), a view of another layout, with a head dimension if ``rank4``."""
    if token and u.dim() == 2:
        u = u.unsqueeze(-2)
    if heads:
        n = math.prod(heads)
        u = u.reshape(u.shape[0] // n, *heads, *u.shape[1:])
    if rank4 or (layout == "channels_last" and u.dim() < 4):
        u = u.unsqueeze(1) if u.dim() == 3 else u.unsqueeze(1).unsqueeze(1)
    if layout == "transposed":
        return u.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":
        wide = torch.zeros(*u.shape[:-1], 2 * u.shape[-1], dtype=u.dtype)
        wide[..., ::2] = u
        return wide[..., ::2]
    if layout == "expanded":
        return u[:1].expand_as(u)
    if layout == "broadcast":  # a token's values over the tokens (a row's first channel over the channels)
        return (u[..., :1, :] if u.dim() >= 3 else u[..., :1]).expand_as(u)
    if layout == "channels_last":
        if u.dim() == 4:
            return u.contiguous(memory_format=torch.channels_last)
        if u.dim() == 5:
            return u.contiguous(memory_format=torch.channels_last_3d)
    return u


def _start(y0: Tensor | PhaseState, context: Context) -> tuple[Any, list[Tensor]]:
    """The state a run in ``context`` starts from (cast, laid out, requiring grad in training and where the context
    says so under ``no_grad``) and its leaves."""
    leaves, laid = [], []
    for u in _parts(y0):
        leaf = u.detach().to(context.dtype)
        if context.mode in ("enable_grad", "no_grad, y requires grad"):
            leaf.requires_grad_(True)
        leaves.append(leaf)
        laid.append(_laid_out(leaf, context.layout, context.rank4, context.heads, context.token))
    return (PhaseState(*laid) if isinstance(y0, PhaseState) else laid[0]), leaves


def _time(value: float, context: Context, is_dt: bool):
    if context.time == "float":
        return value
    return torch.tensor(value, dtype=torch.float64).requires_grad_(is_dt and context.time == "learnable dt")


def _detached(y: Tensor | PhaseState) -> Tensor:
    """``y`` flat, detached, a copy in float64 (half-precision values are exact in it)."""
    return _flat(PhaseState(*(u.detach().double() for u in y)) if isinstance(y, PhaseState) else y.detach().double())


def _packed(parts: Any, like: Any) -> Any:
    return PhaseState(*parts) if isinstance(like, PhaseState) else parts[0]


@dataclass
class _Grads:
    """The gradient of a step along a cotangent with respect to the state, a learnable ``dt``, the field's trainable
    weights and the scheme's own parameters (each flat, float64; ``None`` where there is none)."""

    y: Tensor
    dt: float | None = None
    weights: Tensor | None = None
    params: Tensor | None = None
    spread: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """How far the weights', the parameters' and a learnable ``dt``'s gradients move when the state moves by one unit
    in the last place of its
    dtype: where the step's own sums cancel (a composition's free coefficient acts at ``dt⁵``), the low-precision
    gradient is that noisy, and is held to it."""


@dataclass
class _Run:
    counts: list[tuple[int, ...]]
    times: list[list[float]]
    starts: list[Tensor]
    fresh: list[Tensor]
    carried: list[Tensor]
    inverses: list[Tensor | None]
    grads: list[_Grads | None]
    tangents: list[tuple[Tensor, float] | None]


def _cotangent(n: int, seed: int) -> Tensor:
    return torch.randn(n, generator=generator(seed), dtype=torch.float64)


def _flat_grads(found: list[Tensor | None], like: list[Tensor]) -> Tensor | None:
    if not like:
        return None
    return torch.cat([(torch.zeros_like(u) if g is None else g).reshape(-1).double() for u, g in zip(like, found)])


def _fresh_in(
    stepper: AbstractStepper, field: Any, t: Any, y: Any, dt: Any, context: Context, seed: int,
    weights: list[Tensor], own: list[Tensor],
) -> tuple[Any, _Grads | None, tuple[Tensor, float] | None]:  # fmt: skip
    """A step from a fresh ``init`` from ``y`` as the context calls it (:data:`TRANSFORMS`), with what the transform
    or training gives besides: the gradient along the cotangent drawn from ``seed`` (training: with respect to the
    state, a learnable ``dt``, the field's ``weights`` and the scheme's ``own`` parameters; ``grad``: the state), or
    a ``jvp``'s tangent direction and its tangent along the cotangent."""
    transform, n = context.transform, sum(u.numel() for u in _parts(y))

    def step(u: Any) -> Any:
        return _fresh_step(stepper, field, t, u, dt)

    try:
        if transform == "vmap":
            return torch.func.vmap(step)(y), None, None
        if transform == "jvp":
            g = generator(seed + 1000)
            parts = [torch.randn(u.shape, generator=g, dtype=torch.float64).to(u.dtype) for u in _parts(y)]
            fresh, tangent = torch.func.jvp(step, (y,), (_packed(parts, y),))
            r = _cotangent(n, seed)
            return fresh, None, (_detached(_packed(parts, y)), float((_detached(tangent) * r).sum()))
        if transform == "grad":
            r = _cotangent(n, seed).to(_parts(y)[0].dtype)

            def loss(u: Any) -> tuple[Tensor, Any]:
                out = step(u)
                return (_flat(out) * r).sum(), out

            found, fresh = torch.func.grad(loss, has_aux=True)(y)
            return fresh, _Grads(_detached(found)), None
    except NotImplementedError:  # an operation torch has no rule of this transform for: out of its reach
        reject()
    if transform == "compile":  # Dynamo's capture, run by the eager backend: the same kernels, another path to them
        torch.compiler.reset()  # a fresh capture each time (a cached one would fall back to eager past its limit)
        log = logging.getLogger("torch._dynamo")  # its graph breaks (the kit's counting fields break it) are no news
        level = log.level
        try:
            log.setLevel(logging.ERROR)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return torch.compile(step, backend="eager", dynamic=False)(y), None, None
        except torch._dynamo.exc.TorchDynamoException:  # Dynamo cannot capture it: out of its reach
            reject()
        finally:
            log.setLevel(level)
            torch.compiler.reset()
    if transform == "trace":  # what the trace does not take as inputs it holds as constants: none may require grad
        parts = tuple(u.detach() for u in _parts(y))
        frozen = [p for p in (*weights, *own) if p.requires_grad]
        held_t, held_dt = (u.detach() if isinstance(u, Tensor) else u for u in (t, dt))
        try:
            for p in frozen:
                p.requires_grad_(False)
            with warnings.catch_warnings(), torch.jit.optimized_execution(False):  # no fuser: its kernels (tanh)
                warnings.simplefilter("ignore")  # round otherwise, in the field, not in the scheme
                try:
                    with _own_compilation_unit() as unit:
                        traced = torch.jit.trace(
                            lambda *us: _flat(_fresh_step(stepper, field, held_t, _packed(us, y), held_dt)), parts,
                            check_trace=False, _compilation_unit=unit,
                        )  # fmt: skip
                except RuntimeError:  # torch cannot trace it (a torch.func transform inside): out of the tracer's reach
                    reject()
                return _unflat(traced(*parts), y), None, None
        finally:
            for p in frozen:
                p.requires_grad_(True)
    fresh = step(y)
    if not context.training:
        return fresh, None, None
    # from leaves holding the state's values: the carried state's parts depend on each other
    leaves = [u.detach().requires_grad_(True) for u in _parts(y)]
    learnable = [dt] if isinstance(dt, Tensor) and dt.requires_grad else []
    out = _flat(step(_packed(leaves, y)))
    if not out.requires_grad:
        return fresh, None, None
    r = _cotangent(out.numel(), seed).to(out.dtype)
    inputs = leaves + learnable + weights + own
    found = list(torch.autograd.grad((out * r).sum(), inputs, allow_unused=True))
    k, m = len(leaves), len(leaves) + len(learnable)
    on_dt = None if not learnable else (0.0 if found[k] is None else float(found[k]))
    on_w, on_p = _flat_grads(found[m : m + len(weights)], weights), _flat_grads(found[m + len(weights) :], own)
    # the same gradients from the state moved by one unit in the last place, each entry up or down, three times: how
    # noisy the dtype makes them (a relative nudge below half a unit would round back to the same state and show
    # nothing; one draw of the rounding can happen to cancel)
    g, spread = generator(seed + 2000), (0.0, 0.0, 0.0)
    for _ in range(th.GRADIENT_NUDGES):
        moved = [
            torch.nextafter(
                u.detach(), torch.where(torch.rand(u.shape, generator=g) < 0.5, -math.inf, math.inf).to(u)
            ).requires_grad_(True)
            for u in _parts(y)
        ]
        again = _flat(step(_packed(moved, y)))
        other = list(torch.autograd.grad((again * r).sum(), moved + learnable + weights + own, allow_unused=True))
        w_again = _flat_grads(other[m : m + len(weights)], weights)
        p_again = _flat_grads(other[m + len(weights) :], own)
        dt_again = None if not learnable or other[k] is None else other[k].detach().reshape(1).double()
        dt_here = None if on_dt is None else torch.tensor([on_dt], dtype=torch.float64)
        spread = tuple(
            max(was, 0.0 if a is None or b is None else float((a - b).abs().max()))
            for was, (a, b) in zip(spread, ((on_w, w_again), (on_p, p_again), (dt_here, dt_again)))
        )
    return fresh, _Grads(_flat_grads(found[:k], leaves), on_dt, on_w, on_p, spread), None


def _inverted(stepper: AbstractStepper, field: Any, t: Any, y1: Any, dt: Any, context: Context) -> Tensor:
    """The stepper's inverse of ``y1`` (detached, flat); an inverse that raises is the reversible claim's failure."""
    try:
        return _detached(stepper.inverse(field, t, y1, dt))
    except Exception as error:  # noqa: BLE001 - reported as the claim's failure, with its cause
        raise AssertionError(
            f"{_name(stepper)} declares reversible but its inverse raises {type(error).__name__} "
            f"({' '.join(str(error).split())[:160]}) in context ({context})."
        ) from None


def _run(stepper: AbstractStepper, exact: Any, y0, t0: float, dts: list[float], context: Context, seed: int) -> _Run:
    """Take the steps in ``context`` with one field for all of them, the state carried; record each step's
    evaluation counts and times, the state it started from, a step from a fresh ``init`` from that state as the
    context calls it (and its inverse where the scheme is reversible; in training its gradient along a fixed
    cotangent with respect to the state, a learnable ``dt``, the field's weights and the scheme's parameters; under a
    transform what it gives), and the carried step (all detached, flat)."""
    native = _parts(y0)[0].shape
    counts, field = _field(exact, context.field, native)
    weights = _weights(field)
    own = [p for p in stepper.parameters() if p.requires_grad]
    run = _Run([], [], [], [], [], [], [], [])
    with context.entered():
        y, _ = _start(y0, context)
        t = _time(t0, context, False)
        state = stepper.init(field, t, y)
        for i, dt_value in enumerate(dts):
            dt = _time(dt_value, context, True)
            untouched = Untouched(field)  # the fresh step and the carried one
            fresh, grads, tangent = _fresh_in(stepper, field, t, y, dt, context, seed + i, weights, own)
            run.grads.append(grads)
            run.tangents.append(tangent)
            run.inverses.append(_inverted(stepper, field, t, fresh, dt, context) if stepper.reversible else None)
            before, after_fresh = counts.calls(), len(counts.times)
            y1, state = stepper.step(field, t, y, dt, state)
            moved = untouched.changed()
            if moved is not None:
                raise AssertionError(
                    f"{_name(stepper)}.step changed {moved} at step {i} in context ({context}): a step leaves what "
                    "it does not own as it found it (set a mode inside a with block that restores it)."
                )
            run.counts.append(tuple(b - a for a, b in zip(before, counts.calls())))
            run.times.append(counts.times[after_fresh:])
            run.starts.append(_detached(y))
            run.fresh.append(_detached(fresh))
            run.carried.append(_detached(y1))
            y, t = y1, t + dt
    return run


def _ad_rounding(stepper: AbstractStepper, exact: Any, t: Any, y: Any, dt: Any, seed: int) -> float:
    """How many float64 rounding units the field's forward-mode and reverse-mode derivatives differ by at the points a
    step from ``y`` evaluates it, along directions and cotangents drawn from ``seed`` (relative to ``Σ |Jᵀu| |v|``;
    the largest over the evaluations). A field whose derivative cancels inside (a softmax saturated by large logits)
    gives its tangent and its gradient fewer digits than its values, and a step's tangent inherits them: the field's,
    not the scheme's. A field torch.func cannot differentiate counts 1."""
    points: list[tuple[Callable, Any, Tensor]] = []

    def recording(f: Callable) -> Callable:
        def recorded(s: Any, x: Tensor) -> Tensor:
            points.append((f, s, x.detach().clone()))
            return f(s, x)

        return recorded

    with torch.no_grad():
        _fresh_step(stepper, each(exact, recording), t, y, dt)
    g, worst = generator(seed + 2000), 1.0
    for f, s, x in points:
        v = torch.randn(x.shape, generator=g, dtype=torch.float64)
        try:
            out, forward = torch.func.jvp(lambda u, f=f, s=s: f(s, u), (x,), (v,))
            _, pull = torch.func.vjp(lambda u, f=f, s=s: f(s, u), x)
        except (NotImplementedError, RuntimeError):
            continue
        u = torch.randn(out.shape, generator=g, dtype=torch.float64)
        back, forward = pull(u)[0].detach(), forward.detach()
        natural = max(float((back.abs() * v.abs()).sum()), 1e-300)
        worst = max(worst, abs(float((forward * u).sum()) - float((back * v).sum())) / natural / th.EPS)
    return worst


def _reference_grads(
    stepper: AbstractStepper,
    exact: Any,
    y: Any,
    t: float,
    dt: float,
    learnable: bool,
    r: Tensor,
    rounding: float = 0.0,
    seed: int = 0,
    weights: list[Tensor] = (),
    every_operation: bool = False,
):
    """The reference gradient of a step from ``y`` (float64, a plain function, autograd on) along the cotangent ``r``
    with respect to the state, (``learnable``) ``dt``, the field's ``weights`` and the stepper's parameters; returns
    a :class:`_Grads` and ``r``. With ``rounding``, every evaluation's input and result are perturbed by that relative
    size (a model of rounding, which the backward pass sees too); with ``every_operation`` as well, every value the
    step computes (:class:`~solvers.testing._common.RoundingEveryOperation`)."""
    leaves = [u.detach().clone().requires_grad_(True) for u in _parts(y)]
    start = _packed(leaves, y)
    step = torch.tensor(dt, dtype=torch.float64, requires_grad=True) if learnable else dt
    field = rounded_field(exact, rounding_model(rounding, seed)) if rounding else _field(exact, "function")[1]
    own = [p for p in stepper.parameters() if p.requires_grad]
    weights = list(weights)
    every = RoundingEveryOperation(rounding, seed + 2) if every_operation and rounding else contextlib.nullcontext()
    with torch.enable_grad():
        with every:
            out = _flat(_fresh_step(stepper, field, t, start, step))
        extra = [step] if learnable else []
        found = list(torch.autograd.grad((out * r).sum(), leaves + extra + weights + own, allow_unused=True))
    k, m = len(leaves), len(leaves) + len(extra)
    on_dt = None if not learnable else (0.0 if found[k] is None else float(found[k]))
    grads = _Grads(
        _flat_grads(found[:k], leaves), on_dt, _flat_grads(found[m : m + len(weights)], weights),
        _flat_grads(found[m + len(weights) :], own),
    )  # fmt: skip
    return grads, r


def _own_grad_rounding(
    high, exact, y, t, dt, r: Tensor, eps: float, seed: int, weights, magnitude: float, allowed: float
) -> float:
    """``MODELLED_ROUNDING`` times the units (of ``eps``, relative to ``magnitude``) the reference state gradient
    moves when every value the step computes is rounded as well as its start and evaluations, the part that
    halves when the rounding halves (as :func:`~solvers.testing.protocol.amplification` counts it): what a
    low-precision gradient may differ by where the step's own arithmetic is ill-conditioned, for a step nonlinear in
    the state whose linear part rounds within ``allowed`` units (as :func:`~solvers.testing.protocol.own_rounding`;
    else 0). Beyond ``BLOWN_UP``: redrawn."""
    if not rounds_its_own_values(high, exact, t, y, dt, eps, seed, allowed):
        return 0.0
    full, half = (
        _reference_grads(_copy(high), exact, y, t, dt, False, r, size, seed, weights, every_operation=True)[0].y
        for size in (eps, eps / 2)
    )
    moved = float((2 * (full - half)).abs().max()) / (eps * magnitude)
    if not moved <= th.BLOWN_UP:  # rounding there proves nothing
        reject()
    return th.MODELLED_ROUNDING * moved


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


def _tiling(inst: Instance, context: Context, fixed_width: int | None, block: bool = False) -> tuple[Instance, _Tiling]:
    """The instance whose state is one tile (a token problem for a ``(tokens, width)`` size, and for a block
    stepper), and how many tiles the context's size takes (a per-channel stepper's channels are not tiled); in half
    precision the magnitude is clamped into ``HALF_MAGNITUDES``; with ``heads`` the batch holds their product times as
    many samples; the context's ``dt`` replaces the instance's."""
    if context.dtype in (torch.float16, torch.bfloat16):
        low, high = th.HALF_MAGNITUDES
        inst = replace(inst, magnitude=min(max(inst.magnitude, low), high))
    if context.heads:
        inst = replace(inst, batch=inst.batch * math.prod(context.heads))
    if context.dt is not None:
        inst = replace(inst, dt=context.dt)
    if (block or (context.size is not None and context.size != "large")) and inst.tokens == 0:
        inst = replace(inst, tokens=1)
    base = (inst.batch, inst.tokens, inst.width) if inst.tokens else (inst.batch, inst.width)
    if context.size is None:
        return inst, _Tiling(base, (1, 1, 1))
    if context.size == "large":
        entries = inst.batch * max(inst.tokens, 1) * inst.width
        return inst, _Tiling(base, (math.ceil(th.CONTEXT_LARGE_STATE / entries), 1, 1))
    batch, tokens, width = context.size  # reached exactly: the tile's sizes divide the context's
    b = inst.batch if context.heads else _divisor(batch, inst.batch)
    w = inst.width if fixed_width else _divisor(width, inst.width)
    inst = replace(inst, batch=b, tokens=_divisor(tokens, inst.tokens), width=w)
    counts = (1 if context.heads else batch // b, tokens // inst.tokens, 1 if fixed_width else width // w)
    return inst, _Tiling((inst.batch, inst.tokens, inst.width), counts)


def _divisor(n: int, most: int) -> int:
    """The largest divisor of ``n`` that is at most ``most`` (at least 1)."""
    return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)


class _Tiled:
    """The field of the whole tiled state: the instance's field on every tile alone."""

    def __init__(self, field: Callable, tiling: _Tiling):
        self.field, self.tiling = field, tiling

    def __call__(self, t, x):
        return self.tiling.join(self.field(t, self.tiling.split(x)))

    def joint_at(self, t, x, v):
        f, tangent = _tangent_of(self.field, t, self.tiling.split(x), self.tiling.split(v))
        return self.tiling.join(f), self.tiling.join(tangent)


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
    ``examples`` drawn instances (:func:`~solvers.testing.strategies.instances`, up to 4 steps; 2 at a transformer
    size, 1 on a state of ``CONTEXT_LARGE_STATE`` entries) each in a drawn
    :func:`contexts`. In each, a run with one field for all steps, the state carried, must

    1. evaluate the field (a block stepper: its attention and its FFN) as often at every step as the reference run
       from the same start (``evals_per_step``, first-same-as-last, start-up), at the same times (to float64's
       rounding);
    2. at every step, take a step from a fresh ``init`` (as the context calls it: directly, under a ``torch.func``
       transform or ``jit.trace``) that agrees with the reference step from the same state, and (``reversible``) an
       inverse that agrees with the reference inverse; unless ``multistep``, a carried step that agrees with the fresh
       one;
    3. in training (``enable_grad``, float32 or float64) give the reference's gradient of the step, along a fixed
       cotangent, with respect to the state, the field's trainable weights and the scheme's own parameters (the
       reference: a float64 copy of the stepper, autograd on), and a learnable ``dt`` (against difference quotients);
       under ``torch.func.grad`` its gradient with respect to the state, under ``torch.func.jvp`` its tangent along a
       drawn direction, the reference's (allowed also what :func:`_ad_rounding` measures of the field itself).

    Agreement is to ``ONE_STEP_RTOL`` in float64 and to :func:`~solvers.testing.protocol.float32_allowance` rounding
    units of the state's dtype otherwise, relative to the states' sizes and ``|dt| max|f|`` (a gradient relative to
    the cotangent's and the reference gradient's sizes; a ``dt`` gradient to ``sum|r|`` times the largest entry of the
    scheme's limit field, :func:`_speed`), each times how much
    the step amplifies rounding. ``fields``, if given, is called as ``fields(width, seed)`` and returns a field
    ``f(t, x)`` for states ``(batch, tokens, width)`` (an ``nn.Module`` is evaluated in float64 and ``eval()`` mode;
    for a block stepper a :class:`~solvers.Block`, or a field that serves as its attention): your model's own
    attention and FFN join the drawn field kinds (``"given"``), their weights' gradients checked. Returns the largest
    defect (relative)."""
    stepper = _instance(stepper)
    name, pristine = _name(stepper), _copy(stepper)
    block = is_block(stepper)
    fixed_width = stepper_width(stepper)
    width = dim if dim is not None else fixed_width
    allowed_units = float32_allowance(stepper, "contexts")
    worst = [0.0]

    def judge(
        defect: float,
        dtype: torch.dtype,
        gain: float,
        what: str,
        where: str,
        floor: float = 0.0,
        times: float = 0.0,
        own: Callable[[], float] | None = None,
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
        if allowed > th.UNRESOLVED and floor == 0.0:
            return  # the dtype cannot resolve this step (or its inverse): any result would pass, so none is judged
        if floor > allowed:
            allowed, rule = floor, f"difference quotients resolve {floor:g}"
        if times > 0.0:  # a far start: its stage times are held only to float64's rounding there
            allowed += times
            rule += f", plus {times:.3g}, what rounding the far stage times moves it"
        if not math.isfinite(defect):
            big = torch.finfo(dtype).max
            raise AssertionError(
                f"{name} (order {stepper.order}): {what.replace('differs from', 'is not finite where')} is finite, "
                f"{where.replace(': the scheme takes another path in that context', '')}: a value the step computes "
                f"overflows {str(dtype).removeprefix('torch.')} (its largest is {big:.3g}), or divides by zero there."
            )
        if not defect <= allowed and own is not None and dtype != torch.float64:  # asked only where needed: slower
            measured = own()
            if measured * unit + times > allowed:
                allowed = measured * unit + times
                rule += f" (or {measured:.3g}, what rounding every value it computes moves it)"
        worst[0] = max(worst[0], defect)
        if not defect <= allowed:
            size = f"{defect / unit:.3g} rounding units" if unit != 1.0 else f"{defect:.3g} (relative)"
            hint = unstated_coefficients(stepper, "contexts") if dtype != torch.float64 else ""
            raise AssertionError(f"{name} (order {stepper.order}): {what} by {size} {where} ({rule}).{hint}")

    seen: set[tuple[str, bool]] = set()

    def held(kind: str, value: float) -> None:
        """Once for each side (earlier or later times, smaller or larger states): the order measured where the
        scheme's own dynamics differ from those the other checks measure it on."""
        key = (kind, value > (0.0 if kind == "time" else 1.0))
        if key not in seen:
            seen.add(key)
            _held_there(pristine, dim, kind, value)

    def claim(drawn: _InContext) -> None:
        context = drawn.context
        if context.field == "given" and fields is None:
            return
        inst, tiling = _tiling(drawn.instance, context, fixed_width, block)
        dts = inst.dts()[: {None: 4, "large": 1}.get(context.size, 2)]  # a large state: one step says what it says
        own = placed(pristine, inst.t0, dts)
        t0 = own if context.t0 is None else placed(pristine, context.t0, dts)
        if own is None or t0 is None:
            reject()  # no such run inside the times the scheme states it is defined on
        shift, scale = t0 - own, context.scale
        low = inst.steppers(pristine)[0]
        problem = inst.problem(low)
        inner = _exact(problem, context, inst.seed, fields, low)
        ran = _in_dtype(low, context.dtype)
        high = _float64(_copy(ran))
        # the reference runs from the instance's own start at its own magnitude where the scheme's limit is the same
        # there (a far start runs the field shifted in time and a scale runs state and field scaled, so that the
        # context's run is the reference's); where its own dynamics depend on the time or the size (a friction r / t,
        # c tanh v), the reference runs where the context does, and the order is measured there (:func:`_held_there`)
        span = [own + sum(dts[:i]) + c * dt for i, dt in enumerate(dts) for c in (0.0, 0.5, 1.0)]
        visited = _visited(high, inner, problem.initial(low), own, dts)
        in_time, in_size = _commutes(high, inner, visited, span, shift, scale)
        in_time, in_size = in_time and high.time_invariant, in_size and high.scale_invariant  # unless it says not
        if not in_time:
            held("time", t0)
        if not in_size:
            held("size", scale)
        frame_shift = shift if in_time else 0.0  # how far the reference's times lie before the context's
        frame_scale = scale if in_size else 1.0  # what the context's states are divided by to be the reference's
        t_ref = t0 - frame_shift
        exact = _framed(inner, shift - frame_shift, scale / frame_scale)  # plain functions, nothing to inspect
        weights = _weights(inner)
        small = problem.initial(low)  # one tile
        whole = tiling.tiles > 1
        if whole:  # the context's size: independent tiles, each a state of the instance's shape
            g = generator(inst.seed)
            parts = [torch.randn(tiling.shape, generator=g, dtype=torch.float64) * problem.scale for _ in _parts(small)]
            y0 = _packed(parts, small)
            field = each(inner, lambda f: _Tiled(f, tiling))
        else:
            y0, field = small, inner
        if shift != 0.0:
            field = each(field, lambda f: _Shifted(f, shift))
        if scale != 1.0:
            field = each(field, lambda f: _Scaled(f, scale))
            y0 = _packed([u * scale for u in _parts(y0)], y0)
        which = tiling.picked(inst.seed) if whole else [0]
        picked = len(which) * tiling.base[0]
        like = _reshaped(small, picked)  # the form of the picked tiles stacked

        def tiles_of(flat: Tensor) -> Tensor:
            return tiling.take(flat, y0, which) if whole else flat

        got = _unscaled(_run(ran, field, y0, t0, dts, context, inst.seed), frame_scale)
        start0 = _unflat(tiles_of(got.starts[0]), like)
        ref = _run(_copy(high), exact, start0, t_ref, dts, REFERENCE, inst.seed)
        for i, (n, m) in enumerate(zip(got.counts, ref.counts)):
            if n != m:
                raise AssertionError(
                    f"{name} declares evals_per_step = {stepper.evals_per_step}{' and fsal' if stepper.fsal else ''}"
                    f" but evaluated {_calls(n, block)} in step {i} in context ({context}), {_calls(m, block)} in "
                    f"the reference context ({REFERENCE}), one field for all steps."
                )
        t = t_ref
        for i, dt in enumerate(dts):
            far = t + frame_shift  # where the context's step starts
            slack = 1e-12 * max(1.0, abs(far), abs(dt))
            slack += 4 * _eps(context.dtype) * (abs(far) + abs(dt))  # times from a parameter of the state's dtype
            for a, b in zip(got.times[i], ref.times[i]):
                if abs((a - frame_shift) - b) > slack:
                    raise AssertionError(
                        f"{name} evaluated the field at t = {_show(got.times[i])} in step {i} in context ({context}) "
                        f"but at t = {_show([u + frame_shift for u in ref.times[i]])} in the reference context "
                        f"shifted to its start, from t = {far:.6g}, dt = {dt:.4g}."
                    )
            start = tiles_of(got.starts[i])
            y = _unflat(start, like)
            fresh = tiles_of(got.fresh[i])
            seen = [0.0]
            counted = _field(each(exact, lambda f, seen=seen: _Peak(f, seen)), "function")[1]
            with torch.no_grad():
                reference = _fresh_step(_copy(high), counted, t, y, dt)
                rate = field_size(exact, t, y.x if isinstance(y, PhaseState) else y)
                back = None
                if stepper.reversible:
                    back = _flat(_copy(high).inverse(counted, t, _unflat(fresh, like), dt))
            reference = _flat(reference)
            reached = max(seen[0], float(reference.abs().max()), float(start.abs().max()))
            if context.dtype != torch.float64 and not reached <= torch.finfo(context.dtype).max / 16:
                reject()  # the step's own stages leave the dtype's range: it cannot hold this step
            size = max(float(start.abs().max()), float(reference.abs().max()), abs(dt) * rate, 1e-300)
            gain = amplification(_copy(high), exact, t, y, dt, reference, _eps(context.dtype), inst.seed + i)
            if not gain <= th.BLOWN_UP:  # outside the scheme's stability region: rounding there proves nothing
                reject()
            times = 0.0
            if frame_shift != 0.0:
                moved = _time_rounding(_copy(high), exact, t, y, dt, far, inst.seed + i)
                times = th.MODELLED_ROUNDING * float((_flat(moved) - reference).abs().max()) / size
            if context.dtype != torch.float64:
                moved = time_held_step(_copy(high), exact, t, y, dt, far, _eps(context.dtype))
                times += th.MODELLED_ROUNDING * float((_flat(moved) - reference).abs().max()) / size
            shown = f" (tiles {which} of {tiling.tiles} of {problem.name})" if whole else f", on {problem.name}"
            started = (
                f"from t = {far:.4g} (the reference from t = {t:.4g})" if frame_shift != 0.0 else f"from t = {t:.4g}"
            )
            where = f"at step {i} {started}, dt = {dt:.4g}{shown}, in context ({context})"
            judge(
                float((fresh - reference).abs().max()) / size,
                context.dtype,
                gain,
                "its step differs from the reference context's step from the same state",
                where + ": the scheme takes another path in that context",
                times=times,
                own=partial(
                    own_rounding, high, exact, t, y, dt, reference, _eps(context.dtype), inst.seed + i, allowed_units
                ),
            )
            if back is not None:
                after = _unflat(fresh, like)
                gain_back = amplification(
                    _copy(high), exact, t, after, dt, back, _eps(context.dtype), inst.seed + i, inverse=True
                )
                times_back = 0.0
                if frame_shift != 0.0:
                    moved = _time_rounding(_copy(high), exact, t, after, dt, far, inst.seed + i, inverse=True)
                    times_back = th.MODELLED_ROUNDING * float((_flat(moved) - back).abs().max()) / size
                if context.dtype != torch.float64:
                    moved = time_held_step(_copy(high), exact, t, after, dt, far, _eps(context.dtype), inverse=True)
                    times_back += th.MODELLED_ROUNDING * float((_flat(moved) - back).abs().max()) / size
                judge(
                    float((tiles_of(got.inverses[i]) - back).abs().max()) / size,
                    context.dtype,
                    gain_back,
                    "its inverse differs from the reference context's inverse of the same state",
                    where,
                    times=times_back,
                )
            itself = float((ref.carried[i] - ref.fresh[i]).abs().max()) / size  # in the reference context itself
            if not stepper.multistep and itself <= th.ONE_STEP_RTOL * max(1.0, gain):  # else check_one_step says it
                judge(
                    float((tiles_of(got.carried[i]) - fresh).abs().max()) / size,
                    context.dtype,
                    gain,
                    "its step from the carried state differs from a step from a fresh init",
                    where + " (a value carried between steps is kept in another precision or path there)",
                )
            grads, tangent = got.grads[i], got.tangents[i]
            if grads is None and tangent is None:
                t = t + dt
                continue
            r_whole = _cotangent(got.fresh[i].numel(), inst.seed + i)
            r = tiles_of(r_whole)
            exact_grads, _ = _reference_grads(_copy(high), exact, y, t, dt, False, r, weights=weights)
            ref_y = exact_grads.y
            magnitude = max(float(ref_y.abs().max()), float(r.abs().max()))
            if not magnitude <= th.BLOWN_UP * float(r.abs().sum()):  # |∂y₁/∂y| beyond BLOWN_UP somewhere: outside
                reject()  # the stability region (an eighth-order composition at dt = 3.16: 1e139), nothing to judge
            eps = _eps(context.dtype)  # how much modelled rounding moves the gradient (the backward pass too)
            noisy, _ = _reference_grads(
                _copy(high), exact, y, t, dt, False, r, rounding=eps, seed=inst.seed + i, weights=weights
            )
            gain_grad = float((noisy.y - ref_y).abs().max()) / (eps * magnitude)
            own_grad = partial(
                _own_grad_rounding, high, exact, y, t, dt, r, eps, inst.seed + i, weights, magnitude, allowed_units
            )

            times_grad = 0.0
            if frame_shift != 0.0:
                late = _time_rounding_field(exact, far, dt, inst.seed + i)
                wobbled, _ = _reference_grads(_copy(high), late, y, t, dt, False, r)
                times_grad = th.MODELLED_ROUNDING * float((wobbled.y - ref_y).abs().max()) / magnitude
            if context.dtype != torch.float64:  # its times held in its dtype, as its values are allowed (above)
                later = t + eps * (abs(far) + abs(dt))
                held_grads, _ = _reference_grads(_copy(high), exact, y, later, dt, False, r)
                times_grad += th.MODELLED_ROUNDING * float((held_grads.y - ref_y).abs().max()) / magnitude
            if tangent is not None:  # under jvp: its tangent along the cotangent against the reference gradient
                direction, along = tangent
                expected = float((ref_y * direction).sum())
                natural = max(float((ref_y.abs() * direction.abs()).sum()), 1e-300)
                judge(
                    abs(along - expected) / natural,
                    context.dtype,
                    max(gain, gain_grad, _ad_rounding(_copy(high), exact, t, y, dt, inst.seed + i)),
                    "its tangent under torch.func.jvp differs from the reference gradient's along the same direction",
                    where + " (forward-mode AD sees another computation there)",
                    times=times_grad,
                    own=own_grad,
                )
                t = t + dt
                continue
            judge(
                float((tiles_of(grads.y) - ref_y).abs().max()) / magnitude,
                context.dtype,
                max(gain, gain_grad),
                "the gradient of its step with respect to the state differs from the reference context's",
                where + " (autograd sees another computation there)",
                times=times_grad,
                own=own_grad,
            )
            # a scheme's coefficient moves the step by |dt| times what its stages add, the scale its gradient rounds
            # on: where its stages agree the gradient is 0 (a consistent family's coefficients sum to 1 for every
            # parameter) and float32's rounding of the coefficients is all it shows (TripleJump, rows of one token)
            increment = float(r.abs().sum()) * abs(dt) * _speed(high, exact, t, y, rate)
            for what, on, exact_on, noisy_on, spread, floor_on in (
                ("the field's weights", grads.weights, exact_grads.weights, noisy.weights, grads.spread[0], 0.0),
                ("its own parameters", grads.params, exact_grads.params, noisy.params, grads.spread[1], increment),
            ):
                if whole or on is None or exact_on is None:  # tiles: a weight's gradient sums over every tile
                    continue
                scale_on = max(float(exact_on.abs().max()), floor_on, 1e-300)
                modelled = float((noisy_on - exact_on).abs().max()) / (eps * scale_on)
                judge(
                    float((on - exact_on).abs().max()) / scale_on,
                    context.dtype,
                    max(gain, modelled, th.MODELLED_ROUNDING * spread / (eps * scale_on)),
                    f"the gradient of its step with respect to {what} differs from the reference context's",
                    where + " (a gradient is lost, detached or rounded there)",
                    times=times_grad,
                )
            if grads.dt is not None and not whole:  # against difference quotients in dt (a dt gradient sums tiles)
                ref_dt, resolved = _dt_quotient(_copy(high), exact, y, t, dt, r)
                natural = max(float(r.abs().sum()) * _speed(high, exact, t, y, rate), abs(ref_dt), 1e-300)
                judge(
                    abs(grads.dt - ref_dt) / natural,
                    context.dtype,
                    max(gain, th.MODELLED_ROUNDING * grads.spread[2] / (eps * natural)),
                    "the gradient of its step with respect to a learnable dt differs from difference quotients in dt",
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
    rows = replace(fixed_instance, tokens=0)  # under vmap each sample of rows is a rank-1 state
    # the large state is rows: what it asks (a path taken at 2^20 entries) does not need attention over a million
    # three-token tiles, a softmax over rows of three that costs more than all other fixed contexts together; drawn
    # instances reach a large state of tokens
    fixed = [_InContext(rows if c.size == "large" or c.token else fixed_instance, c) for c in (*CONTEXTS, *given)]
    fixed.append(_InContext(rows, Context(torch.float32, "no_grad", "module", transform="vmap")))
    strategy = st.builds(
        _InContext, instances(pristine, width, max_steps=4, large=False), contexts(given=fields is not None)
    )
    check_drawn(strategy, claim, examples, fixed=fixed)
    return worst[0]


def _calls(counts: tuple[int, ...], block: bool) -> str:
    if block:
        return f"the attention {counts[0]} times" + (f" and the FFN {counts[1]} times" if len(counts) > 1 else "")
    return f"the field {counts[0]} times"


def _framed(inner: Any, rest: float, k: float) -> Any:
    """The reference's field, plain functions: ``k f(t - rest, x / k)`` of each of ``inner``'s fields."""

    def framed(f: Callable) -> Callable:
        def exact(s, x):
            return f(s, x) if k == 1.0 and rest == 0.0 else k * f(s - rest, x / k)

        def joint_at(s, x, v):
            value, tangent = _tangent_of(f, s - rest, x / k, v / k)
            return k * value, k * tangent

        exact.joint_at = joint_at
        return exact

    return each(inner, framed)


@torch.no_grad()
def _commutes(
    stepper: AbstractStepper, inner: Any, ys: list[Any], times: list[float], shift: float, scale: float
) -> tuple[bool, bool]:
    """Whether the stepper's limit field commutes with shifting the time by ``shift`` (``L[f(· - s)](t + s, y) =
    L[f](t, y)``) and with scaling the state and the field by ``scale`` (``L[m f(·/m)](t, m y) = m L[f](t, y)``), to
    ``COMMUTES`` (relative), at every one of ``times`` (the run's step starts, middles and ends: a friction even in
    ``t``, ``r / sqrt(1 + t²)``, agrees at ``±10`` and not over the steps after them; a force ``b sin(w t)`` of the
    scheme's own scales at ``t = 0`` and nowhere else) and every state of ``ys`` (the states the run visits: a
    friction ``c clamp(v, -1, 1)`` scales where ``|v| < 1`` and not where the run takes it past 1). Most
    schemes' limits do (the field itself, a momentum, a fixed friction ``γ v``): their step must then commute too, and
    a context that shifts or scales is compared with the reference where the other checks vouch for it. A friction
    ``r / t`` or ``c tanh v`` of the scheme's own does not: its step is compared with the reference where the context
    runs it. A scheme with no limit (order 0) commutes."""
    points = [(t, y) for y in ys for t in times]
    try:
        limit = stepper.limit_field(inner)
        bases = [_flat(limit(t, y)) for t, y in points]
    except ValueError:
        return True, True

    def near(value: Tensor, base: Tensor) -> bool:
        size = max(float(base.abs().max()), 1e-300)
        return bool(torch.isfinite(value).all()) and float((value - base).abs().max()) <= th.COMMUTES * size

    in_time = in_size = True
    try:
        if shift != 0.0:
            shifted = stepper.limit_field(each(inner, lambda f: _Shifted(f, shift)))
            in_time = all(near(_flat(shifted(t + shift, y)), base) for (t, y), base in zip(points, bases))
        if scale != 1.0:
            scaled = stepper.limit_field(each(inner, lambda f: _Scaled(f, scale)))
            in_size = all(
                near(_flat(scaled(t, _packed([u * scale for u in _parts(y)], y))) / scale, base)
                for (t, y), base in zip(points, bases)
            )
    except (ArithmeticError, ValueError, RuntimeError):
        return shift == 0.0, scale == 1.0
    return in_time, in_size


@torch.no_grad()
def _visited(stepper: AbstractStepper, inner: Any, y0: Any, t0: float, dts: list[float]) -> list[Any]:
    """The states a float64 run of ``stepper`` on ``inner`` from ``(t0, y0)`` visits over ``dts`` (as far as it stays
    finite): where :func:`_commutes` asks whether the limit commutes."""
    s, ys, y, t = _copy(stepper), [y0], y0, t0
    try:
        state = s.init(inner, t, y)
        for dt in dts:
            y, state = s.step(inner, t, y, dt, state)
            if not all(bool(torch.isfinite(u).all()) for u in _parts(y)):
                break
            ys.append(y)
            t = t + dt
    except (ArithmeticError, ValueError, RuntimeError):
        pass
    return ys


def _held_there(stepper: AbstractStepper, dim: int | None, kind: str, value: float) -> None:
    """The order measured where a scheme's own dynamics differ: from the far start ``value`` (``kind == "time"``), or
    at the magnitude ``value`` (``"size"``), on the last of :func:`~solvers.testing.problems.default_problems` (a
    scheme whose step takes another path there, with its limit, is held to its order there). There the error must
    fall at least like ``dt**order``, as on a drawn problem (:func:`~solvers.testing.order._faster`): its own
    dynamics can cancel a term of its error (a friction ``c clamp(v, -1, 1)`` saturated at large states is a
    constant force, and a first-order treatment of it is exact), so a faster fall there is no counterexample; the
    fixed problems hold the slope to the declared order."""
    from .order import _assert_order, _beyond_resolution, _faster, measure_order, placed_problem
    from .problems import default_problems, scaled, started

    s = _float64(_copy(stepper))
    if s.order == 0:
        return
    base = default_problems(s, dim)[-1]
    if kind == "time":
        problem = placed_problem(s, started(base, value))
        what = f" (its step depends on the absolute time: measured from t = {problem.t0:.6g})"
    else:
        problem = placed_problem(s, scaled(base, value))
        what = f" (its step depends on the size of its state: measured at magnitude {value:.4g})"
    finest = abs(problem.T) / th.MAX_STEPS
    try:
        stiff = lipschitz(s.limit_field(problem.field_for(s)), problem.t0, problem.initial(s)) * finest > 1
    except (ArithmeticError, ValueError, RuntimeError):
        stiff = True
    if stiff:  # its own dynamics there are too stiff for the finest grid to reach its asymptotic order
        return
    m = measure_order(s, problem)
    if not (_faster(s.order, m) or _beyond_resolution(s.order, m)):
        _assert_order(f"{_name(stepper)}{what}", s.order, m)


def _show(times: list[float]) -> str:
    return "[" + ", ".join(f"{u:.10g}" for u in times) + "]"


def _unscaled(run: _Run, scale: float) -> _Run:
    """A run of the state scaled by ``scale`` (a power of two) as the unscaled run: its states divided by it (exact),
    the gradient with respect to the state and a tangent unchanged, those with respect to a ``dt``, the field's
    weights and the scheme's parameters divided by it."""
    if scale == 1.0:
        return run

    def down(g: _Grads | None) -> _Grads | None:
        if g is None:
            return None
        return _Grads(
            g.y, None if g.dt is None else g.dt / scale, None if g.weights is None else g.weights / scale,
            None if g.params is None else g.params / scale, tuple(u / scale for u in g.spread),
        )  # fmt: skip

    inverses = [None if u is None else u / scale for u in run.inverses]
    return _Run(
        run.counts,
        run.times,
        [u / scale for u in run.starts],
        [u / scale for u in run.fresh],
        [u / scale for u in run.carried],
        inverses,
        [down(g) for g in run.grads],
        run.tangents,
    )


def _time_rounding_field(exact: Any, far: float, dt: float, seed: int) -> Any:
    """``exact`` with every evaluation's time off by float64's rounding unit of times near ``far``, up or down (from
    ``seed``): how a run started far from ``t = 0`` holds its stage times (a block's fields each). A whole unit, not a
    uniform fraction of one: a stage time there is rounded twice (``far + c dt``, then the frame's shift), and a
    fraction let BogackiShampine3's tangent at ``t = 17783`` exceed the allowance by a third."""
    g = generator(seed)
    unit = th.EPS * (abs(far) + abs(dt))

    def wobbling(f: Callable) -> Callable:
        def late(s, x):
            return f(s + unit * (1.0 if float(torch.rand((), generator=g, dtype=torch.float64)) < 0.5 else -1.0), x)

        return late

    return each(exact, wobbling)


def _time_rounding(
    stepper: AbstractStepper, exact: Any, t: float, y: Any, dt: float, far: float, seed: int, inverse: bool = False
):
    """The reference step from ``y`` at ``t`` (its inverse, with ``inverse``) with its stage times rounded as near
    ``far`` (:func:`_time_rounding_field`): a far start's honest difference from the reference is this step's from
    the exact one, times ``MODELLED_ROUNDING``. An inverse is moved by it on its own: it may amplify the stage times'
    rounding more than the step does (Omelyan's fourth order, dt = 3.65 from t = 10⁴: 8.4e-11 where the step moved
    2.7e-12)."""
    counted = _field(_time_rounding_field(exact, far, dt, seed), "function")[1]
    with torch.no_grad():
        return stepper.inverse(counted, t, y, dt) if inverse else _fresh_step(stepper, counted, t, y, dt)


@contextlib.contextmanager
def _own_compilation_unit():
    """A TorchScript compilation unit of its own for a trace, freed with it: torch registers every trace in its global
    unit, which keeps it and every tensor it holds as a constant (a drawn field's weights, a state of 2²⁰ entries)
    for the life of the process, so a sweep of traces grew by gigabytes."""
    state = torch.jit._state
    kept, unit = state._python_cu, torch.jit.CompilationUnit()
    state._python_cu = unit
    try:
        yield unit
    finally:
        state._python_cu = kept


def _speed(stepper: AbstractStepper, field: Any, t: Any, y: Any, rate: float) -> float:
    """How fast a step moves its state as ``dt`` grows, the scale a ``dt`` gradient is judged on: the largest entry of
    the scheme's limit field at ``(t, y)`` (for a second-order scheme its velocity beside its acceleration, with any
    friction of its own), and at least ``rate``, the field's size. The field alone can be small, even zero (an
    attention over one channel), where the drift ``x + dt v`` and a friction still move the state; a scheme with no
    small-step limit: its velocity beside ``rate``."""
    velocity = float(y.v.abs().max()) if isinstance(y, PhaseState) else 0.0
    try:
        limit = stepper.limit_field(field)
        with torch.no_grad():
            value = limit(t, y)
    except Exception:  # noqa: BLE001 - no small-step limit (order 0), or none that can be evaluated here
        return max(rate, velocity)
    found = max(float(u.abs().max()) for u in _parts(value))
    return max(rate, velocity, found) if math.isfinite(found) else max(rate, velocity)


def _dt_quotient(stepper, exact, y, t, dt: float, r: Tensor) -> tuple[float, float]:
    """``r · (step(dt + h) - step(dt - h)) / 2h`` in float64 at ``h = 10⁻ᵏ |dt|``, ``k = 1 … 7``, where two
    neighbouring quotients agree best (:func:`~solvers.testing.protocol.best_quotient`), and their spread: the
    derivative of a step in its size, independent of how the scheme handles a ``dt`` that requires grad, and how far
    it can be trusted (rounding dominates a small ``h`` where the field is small beside the state, truncation a large
    one where a composition's sub-steps are large)."""
    counted = _field(exact, "function")[1]

    def quotient(k: float) -> float:
        h = k * abs(dt)
        with torch.no_grad():
            up = _flat(_fresh_step(_copy(stepper), counted, t, y, dt + h))
            down = _flat(_fresh_step(_copy(stepper), counted, t, y, dt - h))
        return float((r * (up - down)).sum()) / (2 * h)

    return best_quotient(quotient, tuple(10.0**-k for k in range(7, 0, -1)))
