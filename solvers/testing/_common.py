"""Helpers every check shares: instances and copies of a stepper, parameter moves, walking what a state holds."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from .problems import generator


def _instance(stepper: AbstractStepper | type[AbstractStepper]) -> AbstractStepper:
    return stepper() if isinstance(stepper, type) else stepper


def _name(stepper: AbstractStepper) -> str:
    return type(stepper).__name__


@contextlib.contextmanager
def _one_thread():
    """The kit's problems are tiny: one intra-op thread is faster, and immune to a busy machine's thread contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def reachable_tensors(obj: Any) -> Iterator[tuple[str, Tensor]]:
    """Every tensor ``obj`` holds, with a path naming where: through tuples (named ones too), lists, dicts, deques,
    dataclasses, modules' parameters and buffers, and plain objects' attributes. Callables other than modules (a
    field a state remembers) are not entered: what they hold is not the scheme's."""
    seen: set[int] = set()

    def walk(value: Any, path: str) -> Iterator[tuple[str, Tensor]]:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, Tensor):
            yield path, value
        elif isinstance(value, torch.nn.Module):
            for name, t in (*value.named_parameters(recurse=False), *value.named_buffers(recurse=False)):
                yield from walk(t, f"{path}.{name}")
            for name, child in value.named_children():
                yield from walk(child, f"{path}.{name}")
            for name, item in vars(value).items():
                if not name.startswith("_") and not callable(item):
                    yield from walk(item, f"{path}.{name}")
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, f"{path}[{key!r}]")
        elif isinstance(value, tuple) and hasattr(value, "_fields"):
            for name, item in zip(value._fields, value):
                yield from walk(item, f"{path}.{name}")
        elif isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
            for i, item in enumerate(value):
                yield from walk(item, f"{path}[{i}]")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                yield from walk(getattr(value, f.name), f"{path}.{f.name}")
        elif hasattr(value, "__dict__") and not callable(value) and not isinstance(value, type):
            for name, item in vars(value).items():
                yield from walk(item, f"{path}.{name}")

    yield from walk(obj, "")


def structure(obj: Any) -> Any:
    """A picture of the containers ``obj`` holds (kind, length or keys, identity of each tensor): a list appended to,
    or an entry replaced, in place changes it."""
    seen: set[int] = set()

    def picture(value: Any) -> Any:
        if isinstance(value, Tensor):
            return ("tensor", id(value))
        if id(value) in seen:
            return ("seen", id(value))
        seen.add(id(value))
        if isinstance(value, dict):
            return ("dict", id(value), tuple((repr(k), picture(v)) for k, v in value.items()))
        if isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
            return (type(value).__name__, id(value), tuple(picture(v) for v in value))
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return ("dataclass", id(value), tuple(picture(getattr(value, f.name)) for f in dataclasses.fields(value)))
        if hasattr(value, "__dict__") and not callable(value) and not isinstance(value, type):
            return ("object", id(value), tuple((k, picture(v)) for k, v in vars(value).items()))
        return ("value", id(value))

    return picture(obj)


def _copy(stepper: AbstractStepper) -> AbstractStepper:
    """An unused deep copy of ``stepper``. A tensor that carries a graph (a cache a step left on the stepper) cannot be
    deep-copied; it is copied detached. Anything else that cannot be copied (a lock, an open file) is an
    ``AssertionError`` saying so: the kit compares a stepper with unused copies of itself, and a stepper compared
    with itself would prove nothing."""
    try:
        return copy.deepcopy(stepper)
    except Exception as first:  # noqa: BLE001 - retried below, or reported with its reason
        memo: dict[int, Any] = {}
        for _, t in reachable_tensors(stepper):
            if t.grad_fn is not None or not t.is_leaf:
                memo[id(t)] = t.detach().clone()
        if memo:
            try:
                return copy.deepcopy(stepper, memo)
            except Exception:  # noqa: BLE001 - the first reason is the one to report
                pass
        reason = " ".join(str(first).split())[:200]
        raise AssertionError(
            f"the kit compares {_name(stepper)} with unused copies of itself, but copy.deepcopy fails on it "
            f"({type(first).__name__}: {reason}); hold nothing that cannot be copied (a lock, an open file) on the "
            "stepper, or give it a __deepcopy__."
        ) from first


def _moved(stepper: AbstractStepper, seed: int = 0, sigma: float = th.MOVED) -> AbstractStepper | None:
    """A copy of ``stepper`` with every learnable parameter moved by ``N(0, sigma²)`` (``None`` if it has none): a
    declaration must hold wherever training takes the parameters, not only at their start."""
    learnable = [p for p in stepper.parameters() if p.requires_grad]
    if not learnable:
        return None
    moved = _copy(stepper)
    g = generator(seed)
    with torch.no_grad():
        for p in moved.parameters():
            if p.requires_grad:
                p.add_(sigma * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return moved


def _as_trained(stepper: AbstractStepper) -> list[AbstractStepper]:
    """The stepper, and a copy with its learnable parameters moved from their start if it has any (:func:`_moved`);
    :func:`_moved_says` names the copy in a failure."""
    moved = _moved(stepper)
    return [stepper] + ([moved] if moved is not None else [])


_MOVED = f"with its learnable parameters moved by N(0, {th.MOVED}²) from their start"


def _moved_says(stepper: AbstractStepper, s: AbstractStepper, check: Callable, *args: Any) -> Any:
    """``check(*args)``, its failure message saying so when ``s`` is the moved copy of ``stepper``."""
    if s is stepper:
        return check(*args)
    try:
        return check(*args)
    except AssertionError as error:
        raise AssertionError(f"{_name(stepper)}, {_MOVED}: {error}") from error


def _cast(y: Tensor | PhaseState, dtype: torch.dtype) -> Tensor | PhaseState:
    return PhaseState(y.x.to(dtype), y.v.to(dtype)) if isinstance(y, PhaseState) else y.to(dtype)


def _tensors(y: Any) -> tuple[Tensor, ...]:
    return tuple(y) if isinstance(y, PhaseState) else (y,)


def _select(y: Tensor | PhaseState, b: int) -> Tensor | PhaseState:
    return PhaseState(y.x[b : b + 1], y.v[b : b + 1]) if isinstance(y, PhaseState) else y[b : b + 1]


def _fresh_step(stepper: AbstractStepper, field, t, y, dt):
    """One step from a fresh ``init``: nothing a previous step left in ``state`` can serve."""
    return stepper.step(field, t, y, dt, stepper.init(field, t, y))[0]


def rounding_model(eps: float, seed: int) -> Callable[[Tensor], Tensor]:
    """``nudged(u) = u (1 + eps r)``, ``r`` uniform in [-1, 1] from ``seed``, in float64: a model of rounding to a
    relative ``eps`` (the low-precision allowances and the round trips measure how far it moves a step)."""
    g = generator(seed)

    def nudged(u: Tensor) -> Tensor:
        return u * (1 + eps * (2 * torch.rand(u.shape, generator=g, dtype=torch.float64) - 1))

    return nudged


_VIEWS = frozenset(
    "view view_as reshape reshape_as expand expand_as unsqueeze squeeze permute transpose t narrow select split chunk "
    "unbind flatten unflatten movedim as_strided detach __getitem__ real imag".split()
)


class RoundingEveryOperation(TorchFunctionMode):
    """While active, every floating result of a torch function (not in place, not a view) is multiplied by
    ``1 + eps r``, ``r`` uniform in [-1, 1] from ``seed``: a model of a low-precision step's rounding of each value it
    computes (a sum, a quotient, a coefficient times a state), where :func:`rounding_model` rounds only the start and
    the field's evaluations. A step's arithmetic can amplify its own rounding where the start's cannot show it: a drag
    ``v / (1 + c h |v|)`` applied twice, the second time at the pole its first result approaches. (A function mode,
    not a dispatch mode: it sees through ``torch.func`` transforms a step runs.)"""

    def __init__(self, eps: float, seed: int):
        super().__init__()
        self.eps, self.g = eps, generator(seed)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in _VIEWS or (name.endswith("_") and not name.endswith("__")) or name.startswith("__i"):
            return out

        def rounded(u: Any) -> Any:
            if not isinstance(u, Tensor) or not u.is_floating_point() or u.numel() == 0:
                return u
            r = 2 * torch.rand(u.shape, generator=self.g, dtype=torch.float64) - 1
            return u * (1 + self.eps * r).to(u.dtype)

        return tuple(rounded(u) for u in out) if isinstance(out, tuple) else rounded(out)


def rounded_field(field: Any, nudged: Callable[[Tensor], Tensor]) -> Any:
    """``field`` with every evaluation's input and result passed through ``nudged`` (:func:`rounding_model`); a
    :class:`~solvers.Block`'s fields each. A field's velocity (a split layer's sub-step on a second-order state) is
    carried by the field's own chain rule as the unrounded field's is (``joint_at``: a model's FFN carries it by the
    paper's LayerNorm rule, not the exact Jacobian), its result rounded too."""
    from .._splitting import _field_tangent

    def rounding(f: Callable) -> Callable:
        def rounded(t, x):
            return nudged(f(t, nudged(x)))

        def joint_at(t, x, v):
            value, tangent = _field_tangent(f, t, nudged(x), v)
            return nudged(value), nudged(tangent)

        rounded.joint_at = joint_at
        return rounded

    return each(field, rounding)


def is_block(stepper: Any) -> bool:
    """Whether ``stepper`` is a block stepper: it steps on a :class:`~solvers.Block` of a layer's fields (``Split``,
    ``Whole``, or a class of one's own declaring ``steps_on_blocks = True``)."""
    return bool(getattr(stepper, "steps_on_blocks", False))


def each(field: Any, wrap: Callable[[Callable], Any]) -> Any:
    """``wrap(field)`` for a field; for a :class:`~solvers.Block`, the block with each of its fields wrapped (its maps
    kept): what the kit does to a field (count it, shift it in time, scale it, tile it, round it) it does to a
    layer's attention and FFN alike."""
    from .._splitting import Block

    if isinstance(field, Block):
        attention = wrap(field.attention)  # the attention first: what wraps in turn (a counter) sees it first
        return field._replace(attention=attention, ffn=None if field.ffn is None else wrap(field.ffn))
    return wrap(field)


def fields_of(field: Any) -> tuple[Callable, ...]:
    """The fields ``field`` is: itself, or a :class:`~solvers.Block`'s attention and FFN."""
    from .._splitting import Block

    if isinstance(field, Block):
        return (field.attention,) if field.ffn is None else (field.attention, field.ffn)
    return (field,)


class Untouched:
    """What a step leaves as it found it besides its result: torch's default dtype and autograd mode, and the train or
    eval mode of every module its field holds (a step that switches them changes what the caller runs next).
    :meth:`changed` names the first one that moved and puts it back."""

    def __init__(self, field: Any):
        self.dtype, self.grad = torch.get_default_dtype(), torch.is_grad_enabled()
        self.modes = [(m, m.training, i == 0) for f in fields_of(field) for i, m in enumerate(_modules_held(f))]

    def changed(self) -> str | None:
        moved = None
        if torch.get_default_dtype() != self.dtype:
            moved = f"torch's default dtype ({self.dtype} to {torch.get_default_dtype()})"
            torch.set_default_dtype(self.dtype)
        if torch.is_grad_enabled() != self.grad:
            moved = moved or f"autograd's mode (grad {'on' if self.grad else 'off'} to {'off' if self.grad else 'on'})"
            torch.set_grad_enabled(self.grad)
        for module, mode, whole in self.modes:
            if module.training != mode:
                held = "its field (an nn.Module)" if whole else f"the {type(module).__name__} its field holds"
                moved = moved or f"the {'training' if mode else 'eval'} mode of {held}"
                module.train(mode)
        return moved


def _modules_held(field: Any) -> list[torch.nn.Module]:
    """The modules a field is or evaluates (through the kit's wrappers, which keep what they wrap as ``field``)."""
    seen = 0
    while not isinstance(field, torch.nn.Module) and hasattr(field, "field") and seen < 16:
        field, seen = field.field, seen + 1
    return list(field.modules()) if isinstance(field, torch.nn.Module) else []


def draws_randomness(step: Callable[[], Any], field: Any, t: Any, x: Any) -> bool:
    """Whether ``step()`` draws from (or reseeds) torch's global random generator where the field alone does not:
    each is run from the same fresh state, inside a fork that restores the caller's."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0x5EED)
        start = torch.random.get_rng_state()
        step()
        if torch.equal(torch.random.get_rng_state(), start):
            return False
        torch.random.set_rng_state(start)
        with torch.no_grad():
            for f in fields_of(field):
                f(t, x)
        return torch.equal(torch.random.get_rng_state(), start)


def field_size(field: Any, t: Any, x: Tensor) -> float:
    """``max |f(t, x)|`` (a :class:`~solvers.Block`: the sum over its fields): the size of the terms a step adds."""
    with torch.no_grad():
        return sum(float(f(t, x).abs().max()) for f in fields_of(field))


def _float64(stepper: AbstractStepper) -> AbstractStepper:
    """A float64 copy of a stepper with floating parameters or buffers (so that difference quotients in them are not
    float32 rounding), else the stepper itself."""
    tensors = [*stepper.parameters(), *stepper.buffers()]
    if not any(t.is_floating_point() and t.dtype != torch.float64 for t in tensors):
        return stepper
    return _copy(stepper).to(torch.float64)


def _show(numbers: list[float]) -> str:
    return "[" + ", ".join(f"{a:.4g}" for a in numbers) + "]"


# -- times a scheme is defined on -------------------------------------------------------------------------------------


def time_domain(stepper: AbstractStepper) -> tuple[float, float]:
    """The open interval of times ``stepper`` is defined on: what it states as ``time_domain = (low, high)`` (a scheme
    whose own dynamics have a singular time, such as a friction ``r / t``, states where a model runs it, e.g.
    ``(0.0, math.inf)``), else every time. A statement of another form is an ``AssertionError`` saying so."""
    stated = getattr(stepper, "time_domain", None)
    if stated is None:
        return -math.inf, math.inf
    try:
        low, high = (float(u) for u in stated)
    except (TypeError, ValueError):
        low = high = math.nan
    if not low < high:
        raise AssertionError(
            f"{_name(stepper)}.time_domain must be (low, high) with low < high, the open interval of times it is "
            f"defined on (math.inf for no bound), got {stated!r}."
        )
    return low, high


def placed(stepper: AbstractStepper, t0: float, dts: Sequence[float]) -> float | None:
    """A start time for steps of sizes ``dts`` that keeps every time they reach (and one step beyond either end, where a
    composition's sub-steps evaluate) inside the stepper's :func:`time_domain`, at least ``min(1, width / 4)`` from
    an end: ``t0`` itself where it does, else the nearest such start; ``None`` where none fits."""
    low, high = time_domain(stepper)
    if low == -math.inf and high == math.inf:
        return t0
    ends = list(itertools.accumulate(dts, initial=0.0))
    pad = max((abs(float(d)) for d in dts), default=0.0)
    first, last = min(ends) - pad, max(ends) + pad
    margin = min(1.0, (high - low) / 4)
    earliest, latest = low + margin - first, high - margin - last
    if not earliest <= latest:
        return None
    return min(max(float(t0), earliest), latest)


def singular_time(stepper: AbstractStepper, field: Callable, t: Any, y: Any, dt: Any) -> float | None:
    """The first of ``t + c dt`` (``c = 0, 1/4, ..., 1``) where the stepper's limit field raises or is not finite at
    ``y`` (a singular time of the dynamics it claims), else ``None``."""
    try:
        limit = stepper.limit_field(field)
    except Exception:  # noqa: BLE001 - no limit (order 0): nothing singular to name
        return None
    broken = []
    for c in (0.0, 0.25, 0.5, 0.75, 1.0):
        s = t + c * dt
        try:
            with torch.no_grad():
                value = limit(s, y)
            finite = all(bool(torch.isfinite(u).all()) for u in _tensors(value))
        except (ArithmeticError, ValueError, RuntimeError):
            finite = False
        if not finite:
            broken.append(float(s))
    if len(broken) == 5 and float(dt) != 0:  # not finite at every time: the state, not a time, is what breaks it
        return None
    return broken[0] if broken else None


def beyond_reach(stepper: AbstractStepper, field: Callable, t: Any, y: Any, dt: Any) -> bool:
    """Whether a step of ``dt`` from ``y`` lies beyond what any step of the scheme can take, so that a result that is
    not finite says nothing against it: the flow of its limit leaves the finite numbers within the step (the
    dynamics it claims blow up in finite time, as a cubic drag's do backwards), or the limit is so stiff at ``y``
    that ``|dt| L > STIFF`` (``L`` estimated from below by differences: a friction ``c x² v`` at ``x = 1000``)."""
    from .references import _classic_rk4

    try:
        limit = stepper.limit_field(field)
    except Exception:  # noqa: BLE001 - no limit (order 0): nothing to compare with
        return False
    if singular_time(stepper, field, t, y, dt) is not None:  # a singular time of its own is named, not redrawn
        return False
    try:
        with torch.no_grad():
            if not finite(_classic_rk4(limit, y, float(dt), 64, 64, float(t))[0]):
                return True
        stiffness = lipschitz(limit, t, y)
    except (ArithmeticError, ValueError, RuntimeError):
        return True  # the limit itself breaks on the way: its flow leaves the numbers
    return not abs(float(dt)) * stiffness <= th.STIFF


def lipschitz(limit: Callable, t: Any, y: Any) -> float:
    """A lower estimate of the Lipschitz constant of ``limit`` at ``y`` (relative differences along three random
    directions): how fast its flow moves nearby states apart."""
    from .references import _flat, _unflat

    with torch.no_grad():
        base = _flat(y).to(torch.float64)
        f0, g, found = _flat(limit(t, y)), generator(3), 0.0
        for _ in range(3):
            d = 1e-7 * max(float(base.abs().max()), 1e-300) * torch.randn(base.shape, generator=g, dtype=base.dtype)
            moved = _flat(limit(t, _unflat(base + d, y)))
            found = max(found, float((moved - f0).abs().max()) / float(d.abs().max()))
    return found


def not_finite(
    stepper: AbstractStepper, field: Callable, t: Any, y: Any, dt: Any, where: str, error: Any = None
) -> str:
    """The message for a step that raised ``error`` or gave a result that is not finite: its real cause, a singular
    time of the scheme's own dynamics (with how to state where it is defined), or a step that fails where its limit
    field is finite."""
    what = (
        f"raised {type(error).__name__} ({' '.join(str(error).split())[:120]})"
        if error is not None
        else ("gave a result that is not finite")
    )
    at = f"from t = {float(t):.6g} with dt = {float(dt):.4g} {where}"
    singular = singular_time(stepper, field, t, y, dt)
    if singular is not None:
        return (
            f"{_name(stepper)}'s step {at} {what}: its limit field is not finite at t = {singular:.6g}, a singular "
            "time of the dynamics it claims; a scheme defined only on some times states them, e.g. "
            "time_domain = (0.0, math.inf), and the kit keeps every check inside them."
        )
    return (
        f"{_name(stepper)}'s step {at} {what}, from a finite state, where its limit field is finite at every time "
        "the step spans: the step itself breaks there."
    )


def finite(y: Any) -> bool:
    """Whether every entry of ``y`` (a Tensor or a ``PhaseState``) is finite."""
    return all(bool(torch.isfinite(u.detach()).all()) for u in _tensors(y))


def _tangent_of(field: Callable, t: Any, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(f(t, x), J v)`` by the field's own chain rule (its ``joint_at`` or ``joint``), else forward-mode AD: what a
    split layer's sub-step carries the velocity by. Every wrapper of a field the kit makes (counted, shifted, scaled,
    tiled, on tokens) carries it by the field it wraps, so a field given by ``fields=`` with a chain rule of its own
    (a model's FFN through LayerNorm by the paper's rule) is stepped by it in every context, as in the model."""
    from .._splitting import _field_tangent

    return _field_tangent(field, t, x, v)


class _Scaled:
    """A magnitude-free field at the problem's magnitude ``m``: ``m f(t, x / m)`` (the problem stays the problem)."""

    def __init__(self, field: Callable, scale: float):
        self.field, self.scale = field, scale

    def __call__(self, t, x):
        return self.scale * self.field(t, x / self.scale)

    def joint_at(self, t, x, v):
        f, tangent = _tangent_of(self.field, t, x / self.scale, v / self.scale)
        return self.scale * f, self.scale * tangent
