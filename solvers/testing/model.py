"""The claims checked where a model runs them: every step of the model's own forward pass, on its real fields and
states, against the same computation in float64 on deep copies.

``check_in_model(model, batch)`` runs the model's forward pass on ``batch`` as training runs it (training mode,
autograd on, in whatever dtype, autocast and thread count the caller has set) and records each step the depth loop
takes (:func:`solvers.iterate` tells an observer of each one, :func:`solvers._base.observing`): the stepper, the field
(a layer's :class:`~solvers.Block`), ``t``, ``y``, ``dt``, the running state, what the step returned, and the random
state and modes before it. Then, for each recorded step, on deep copies of the stepper, the field and the state cast
to float64 (the reference) and, in the model's own dtype and modes, on the field evaluated exactly (the float64 copy,
its result rounded to the state's dtype: the scheme's own arithmetic is what is measured):

- ``replay``: the step taken again from what it was given (the random state restored: dropout draws the same masks)
  gives what the model got: the step is a function of its inputs, so what is checked is what the model ran;
- ``values``: the step in the model's dtype and modes agrees with the float64 step from the same state, to the
  scheme's rounding allowance (:func:`~solvers.testing.protocol.float32_allowance`) in the dtype's rounding unit,
  times how much the step amplifies rounding;
- ``one_step`` (unless ``multistep``): the step from the running state the model carried equals one from a fresh
  ``init``;
- ``gradients``: the gradient of the step along a cotangent with respect to the state, the field's weights and the
  scheme's own parameters, in the model's dtype, is the float64 copies' (to the same allowance, or to how far the
  dtype's rounding moves it);
- ``evaluations``: a step from a fresh ``init`` with autograd on evaluates the layer's attention (the field)
  ``evals_per_step`` times;
- ``reversible`` (if claimed): the float64 inverse undoes the float64 step;
- ``continuity`` (unless ``order=False``): the step at the model's own ``dt`` and ``t`` is the limit of the steps
  around them (float64, eval mode; :mod:`~solvers.testing.continuity`): the order is measured on refined steps, so a
  scheme that takes another step at exactly the model's size or time shows only here;
- ``order`` (unless ``order=False``, and where the layer has a small-step limit): the one-step error against the flow
  of ``limit_field`` on the real field (in eval mode, deterministic) falls like ``dt**(order + 1)`` as the step is
  refined from the model's own ``dt``, at least. Where it cannot be measured the report says why, step by step
  (``order_unresolved``): an error below what float64 and the reference resolve (an eighth-order step on a smooth
  field), or a step from the edge of the scheme's ``time_domain`` (a friction ``r / t`` stepped from the model's
  ``t = 0``), where its limit is singular; there the continuity in ``t`` is not judged either (the step is defined
  on one side of it only).

A failure names the step (its index in the forward pass, the stepper), the claim, the numbers, and the line that runs
the check again. Symplecticity is not checked here: a model's attention is not the force of a potential, so no step
on it is symplectic; :func:`~solvers.testing.check_stepper` checks it on Hamiltonian problems. The kit does not import
the model's package: any model whose depth loop is :func:`solvers.iterate` (or drives its steps through it) can be
checked.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .._base import AbstractStepper, PhaseState, observing
from . import thresholds as th
from ._common import _fresh_step, _name, _one_thread, each, field_size, reachable_tensors, singular_time, time_domain
from .protocol import amplification, float32_allowance
from .references import _flat, _unflat

_EPS = {torch.float64: th.EPS, torch.float32: th.EPS32}


def _eps(dtype: torch.dtype) -> float:
    return _EPS.get(dtype) or torch.finfo(dtype).eps


@dataclass(frozen=True)
class Modes:
    """The modes a step ran in: autograd, inference mode, CPU autocast (its dtype or ``None``), intra-op threads and
    deterministic algorithms."""

    grad: bool
    inference: bool
    autocast: torch.dtype | None
    threads: int
    deterministic: bool

    @classmethod
    def now(cls) -> Modes:
        cast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        return cls(
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            cast,
            torch.get_num_threads(),
            torch.are_deterministic_algorithms_enabled(),
        )

    @contextlib.contextmanager
    def entered(self, grad: bool | None = None) -> Iterator[None]:
        """Within it, these modes (``grad`` overrides autograd's); leaving restores the ones before."""
        with contextlib.ExitStack() as stack:
            on = self.grad if grad is None else grad
            if self.inference and not on:
                stack.enter_context(torch.inference_mode())
            else:
                stack.enter_context(torch.enable_grad() if on else torch.no_grad())
            if self.autocast is not None:
                stack.enter_context(torch.autocast("cpu", dtype=self.autocast))
            threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
            torch.set_num_threads(self.threads)
            stack.callback(torch.set_num_threads, threads)
            if self.deterministic != deterministic:
                torch.use_deterministic_algorithms(self.deterministic)
                stack.callback(torch.use_deterministic_algorithms, deterministic)
            yield

    def __str__(self) -> str:
        parts = ["autograd on" if self.grad else ("inference mode" if self.inference else "autograd off")]
        if self.autocast is not None:
            parts.append(f"{str(self.autocast).removeprefix('torch.')} autocast")
        parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        if self.deterministic:
            parts.append("deterministic algorithms")
        return ", ".join(parts)


@dataclass
class Step:
    """One step a model took: ``index`` in its forward pass, the ``stepper``, the ``field``, ``t``, ``y``, ``dt``, the
    running ``state`` it was given, what it returned (``y1``, ``state1``), and the random state (``rng``) and
    :class:`Modes` before it."""

    index: int
    stepper: AbstractStepper
    field: Any
    t: Any
    y: Any
    dt: Any
    state: Any
    y1: Any
    state1: Any
    rng: Tensor
    modes: Modes

    def __str__(self) -> str:
        shape = tuple(_parts(self.y)[0].shape)
        dtype = str(_parts(self.y)[0].dtype).removeprefix("torch.")
        return (
            f"step {self.index} of the forward pass ({type(self.stepper).__name__}, t = {float(self.t):.4g}, "
            f"dt = {float(self.dt):.4g}, states {shape} {dtype}, {self.modes})"
        )


def _call(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def record_steps(model: nn.Module, batch: Any, forward: Callable[[nn.Module, Any], Any] | None = None) -> list[Step]:
    """Run ``forward(model, batch)`` (default: ``model(batch)``, ``model(*batch)`` for a tuple, ``model(**batch)`` for
    a dict) in training mode with autograd on, and return every step :func:`solvers.iterate` took in it. The model's
    mode is restored after."""
    steps: list[Step] = []

    def observer(take, stepper, field, t, y, dt, state):
        rng, modes = torch.get_rng_state(), Modes.now()
        y1, state1 = take(stepper, field, t, y, dt, state)
        steps.append(Step(len(steps), stepper, field, t, y, dt, state, y1, state1, rng, modes))
        return y1, state1

    was = model.training
    model.train()
    try:
        with observing(observer), torch.enable_grad():
            (forward or _call)(model, batch)
    finally:
        model.train(was)
    return steps


# -- float64 copies and exact fields ----------------------------------------------------------------------------------


def _float64_copies(*objects: Any) -> tuple[Any, ...]:
    """Deep copies of ``objects``, taken together (what one holds of another stays shared: a state that keeps the
    field or the position it was given keeps the copies), every module and floating tensor in them in float64."""
    held: dict[int, Any] = {}  # a tensor with a graph cannot be deep-copied: its values are
    for _, t in reachable_tensors(objects):
        if t.grad_fn is not None or not t.is_leaf:
            held[id(t)] = t.detach().clone()
    for marker in _stateless(objects):  # a marker holds nothing (a state saying "start here"): it stays itself
        held[id(marker)] = marker
    for function in _functions_in(objects):  # a field that is a closure over the model's modules: copied with them
        _copied_function(function, held)
    copied = copy.deepcopy(objects, held)
    memo: dict[int, Any] = {}

    def cast(value: Any) -> Any:
        if id(value) in memo:
            return memo[id(value)]
        memo[id(value)] = value
        if isinstance(value, nn.Module):
            out = value.double()
        elif isinstance(value, Tensor):
            out = value.detach().double() if value.is_floating_point() else value
        elif isinstance(value, tuple) and hasattr(value, "_fields"):
            out = type(value)(*(cast(v) for v in value))
        elif isinstance(value, (tuple, list)):
            out = type(value)(cast(v) for v in value)
        elif isinstance(value, dict):
            out = {k: cast(v) for k, v in value.items()}
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                object.__setattr__(value, f.name, cast(getattr(value, f.name)))
            out = value
        elif isinstance(value, types.FunctionType):
            for cell in value.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    cell.cell_contents = cast(cell.cell_contents)
            if value.__defaults__:
                value.__defaults__ = tuple(cast(v) for v in value.__defaults__)
            out = value
        elif hasattr(value, "__slots__") or hasattr(value, "__dict__"):
            names = list(getattr(value, "__dict__", {})) + [n for n in getattr(type(value), "__slots__", ()) if
                                                            hasattr(value, n)]  # fmt: skip
            if not isinstance(value, type) and not callable(getattr(value, "__func__", None)):
                for n in names:
                    try:
                        object.__setattr__(value, n, cast(getattr(value, n)))
                    except (AttributeError, TypeError):
                        pass
            out = value
        else:
            out = value
        memo[id(value)] = out
        return out

    return tuple(cast(o) for o in copied)


def _functions_in(value: Any, depth: int = 0) -> Iterator[types.FunctionType]:
    """Python functions (closures, lambdas with defaults) in ``value``: through tuples, lists, dicts and the
    attributes of plain objects, and the cells and defaults of the functions found."""
    if depth > 6 or isinstance(value, (Tensor, nn.Module, str, bytes, int, float, bool, type(None), type)):
        return
    if isinstance(value, types.FunctionType):
        yield value
        inner = [c.cell_contents for c in value.__closure__ or () if _filled(c)] + list(value.__defaults__ or ())
        for v in inner:
            yield from _functions_in(v, depth + 1)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _functions_in(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _functions_in(v, depth + 1)
    elif hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
        for name in [*getattr(value, "__dict__", {}), *getattr(type(value), "__slots__", ())]:
            yield from _functions_in(getattr(value, name, None), depth + 1)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _copied_function(function: types.FunctionType, memo: dict[int, Any]) -> types.FunctionType:
    """A copy of ``function`` whose closure cells and defaults hold deep copies (``memo`` shared, so the model a
    closure reaches is copied once), entered in ``memo``."""
    if id(function) in memo:
        return memo[id(function)]
    cells = []
    for cell in function.__closure__ or ():
        if not _filled(cell):
            cells.append(types.CellType())
            continue
        inner = cell.cell_contents
        made = _copied_function(inner, memo) if isinstance(inner, types.FunctionType) else copy.deepcopy(inner, memo)
        cells.append(types.CellType(made))
    defaults = tuple(
        _copied_function(v, memo) if isinstance(v, types.FunctionType) else copy.deepcopy(v, memo)
        for v in function.__defaults__ or ()
    )
    made = types.FunctionType(function.__code__, function.__globals__, function.__name__, defaults or None,
                              tuple(cells) or None)  # fmt: skip
    made.__kwdefaults__ = copy.deepcopy(function.__kwdefaults__, memo)
    memo[id(function)] = made
    return made


def _stateless(value: Any, depth: int = 0) -> Iterator[Any]:
    """Objects in ``value`` (through tuples, lists and dicts) that hold nothing: no ``__dict__`` and empty slots."""
    if depth > 6 or isinstance(value, (Tensor, nn.Module, str, bytes, int, float, bool, type(None))):
        return
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _stateless(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _stateless(v, depth + 1)
    elif not hasattr(value, "__dict__") and getattr(type(value), "__slots__", None) == ():
        yield value


class _InDtype(nn.Module):
    """A float64 field evaluated on a state of another dtype: the state cast to float64, the result rounded back
    (the field is exact: what a low-precision step differs by is its own arithmetic). An ``nn.Module`` in the mode of
    the model's field (its float64 copy's), holding that copy: a scheme sees a model's field; it counts its calls."""

    def __init__(self, field: Callable):
        super().__init__()
        self.field, self.calls = field, 0
        modules = _modules_in(field)
        self.train(modules[0].training if modules else True)

    def forward(self, t, x):
        self.calls += 1
        return self.field(t, x.double()).to(x.dtype)

    def joint_at(self, t, x, v):
        """The field and its velocity as the model's field carries it (its own chain rule: a model's FFN by the
        paper's LayerNorm rule, not the exact Jacobian), in float64, rounded back."""
        from .._splitting import _field_tangent

        self.calls += 1
        value, tangent = _field_tangent(self.field, t, x.double(), v.double())
        return value.to(x.dtype), tangent.to(v.dtype)


class _MapInDtype:
    """A float64 map (a post-norm LayerNorm) applied to a state of another dtype, the result rounded back; a velocity
    through it by the map's own chain rule."""

    def __init__(self, g: Callable):
        self.g = g

    def __call__(self, x):
        return self.g(x.double()).to(x.dtype)

    def joint(self, x, v):
        from .._splitting import tangent

        value, moved = tangent(self.g, x.double(), v.double())
        return value.to(x.dtype), moved.to(v.dtype)


def _exactly(field: Any) -> Any:
    """``field`` (float64) as the model's dtype sees it, exact: its fields and maps evaluated in float64."""
    from .._splitting import Block

    out = each(field, _InDtype)
    if isinstance(out, Block):
        out = out._replace(
            after_attention=None if field.after_attention is None else _MapInDtype(field.after_attention),
            after_ffn=None if field.after_ffn is None else _MapInDtype(field.after_ffn),
        )
    return out


def _weights(field: Any) -> list[Tensor]:
    """The trainable weights of the modules a (float64 copy of a) field holds, each once."""
    from .._splitting import Block

    out, seen = [], set()
    parts = list(field) if isinstance(field, Block) else [field]
    for part in parts:
        for module in _modules_in(part):
            for p in module.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
    return out


def _modules_in(value: Any, depth: int = 0) -> list[nn.Module]:
    if isinstance(value, nn.Module):
        return [value]
    if depth > 4 or value is None:
        return []
    found: list[nn.Module] = []
    inner = getattr(value, "__self__", None)  # a bound method's module
    if isinstance(inner, nn.Module):
        return [inner]
    if isinstance(value, types.FunctionType):  # a closure over modules, or a lambda holding one as a default
        held = [c.cell_contents for c in value.__closure__ or () if _filled(c)] + list(value.__defaults__ or ())
        for v in held:
            found += _modules_in(v, depth + 1)
        return found
    if isinstance(value, (tuple, list)):
        for v in value:
            found += _modules_in(v, depth + 1)
        return found
    for name in [*getattr(value, "__dict__", {}), *getattr(type(value), "__slots__", ())]:
        found += _modules_in(getattr(value, name, None), depth + 1)
    return found


# -- the check --------------------------------------------------------------------------------------------------------


def _parts(y: Any) -> tuple[Tensor, ...]:
    return tuple(y) if isinstance(y, PhaseState) else (y,)


def _packed(parts: Any, like: Any) -> Any:
    return PhaseState(*parts) if isinstance(like, PhaseState) else parts[0]


def _detached(y: Any, grad: bool = False) -> Any:
    return _packed([u.detach().clone().requires_grad_(grad) for u in _parts(y)], y)


@contextlib.contextmanager
def _random(rng: Tensor) -> Iterator[None]:
    """Within it, the random state ``rng`` (dropout draws the masks it drew); the state before is restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(rng)
        yield


def _cotangent(n: int, seed: int) -> Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _flat_grads(found: list[Tensor | None], like: list[Tensor]) -> Tensor | None:
    if not like:
        return None
    return torch.cat([(torch.zeros_like(u) if g is None else g).reshape(-1).double() for u, g in zip(like, found)])


def _grads(stepper, field, t, y, dt, state, r, weights, fresh: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The gradient of ``r · step`` with respect to the state, ``weights`` and the stepper's own parameters."""
    own = [p for p in stepper.parameters() if p.requires_grad]
    leaves = [u.detach().clone().requires_grad_(True) for u in _parts(y)]
    start = _packed(leaves, y)
    begun = stepper.init(field, t, start) if fresh else state
    out = _flat(stepper.step(field, t, start, dt, begun)[0])
    found = list(torch.autograd.grad((out * r.to(out.dtype)).sum(), leaves + weights + own, allow_unused=True))
    k, m = len(leaves), len(leaves) + len(weights)
    return _flat_grads(found[:k], leaves), _flat_grads(found[k:m], weights), _flat_grads(found[m:], own)


class _Judge:
    """Holds a step to its allowance and names the claim where it fails."""

    def __init__(self, step: Step, dtype: torch.dtype, allowance: float):
        self.step, self.dtype, self.allowance = step, dtype, allowance
        self.worst: dict[str, float] = {}
        self.unresolved: str | None = None  # why the step's order was not measured, where it was not

    def allowed(self, gain: float) -> float:
        """What the scheme's arithmetic allows a step that amplifies rounding ``gain`` times (relative)."""
        unit = th.ONE_STEP_RTOL if self.dtype == torch.float64 else self.allowance * _eps(self.dtype)
        return unit * max(1.0, gain)

    def __call__(self, claim: str, defect: float, gain: float, what: str, floor: float = 0.0) -> None:
        gain = max(1.0, gain)
        allowed = self.allowed(gain)
        if self.dtype == torch.float64:
            rule = f"ONE_STEP_RTOL is {th.ONE_STEP_RTOL:g}"
        else:
            rule = f"its arithmetic allows {self.allowance:.3g} {str(self.dtype).removeprefix('torch.')} rounding units"
        if gain > 1.0:
            rule += f", times {gain:.3g}, how much this step amplifies rounding"
        if floor > allowed:
            allowed, rule = floor, f"with what the field's own rounding moves it, {floor:.3g}"
        self.worst[claim] = max(self.worst.get(claim, 0.0), defect)
        if not defect <= allowed:
            raise AssertionError(
                f"{_name(self.step.stepper)} ({claim}): {what} by {defect:.3g} (relative; {rule}) at {self.step}."
            )


def _check_step(r: Step, order: bool, seed: int) -> dict[str, float]:
    """Every claim of ``r.stepper`` on the step ``r`` (see the module doc); returns the largest defect of each."""
    from .._splitting import Block

    stepper, name = r.stepper, _name(r.stepper)
    claims = stepper.claims(r.field)
    dtype = _parts(r.y)[0].dtype
    allowance = float32_allowance(stepper, "check_in_model")
    judge = _Judge(r, dtype, allowance)
    eps = _eps(dtype)

    # replay: the step is a function of what it was given
    with _random(r.rng), r.modes.entered():
        again = stepper.step(r.field, r.t, r.y, r.dt, r.state)[0]
    got, recorded = _flat(again).detach().double(), _flat(r.y1).detach().double()
    scale = max(float(recorded.abs().max()), 1e-300)
    if not float((got - recorded).abs().max()) <= 64 * eps * scale:
        raise AssertionError(
            f"{name} (replay): taken again from what it was given (the same state, field, t, dt, running state and "
            f"random state), the step differs from what the model got by "
            f"{float((got - recorded).abs().max()) / scale:.3g} (relative) at {r}: it depends on something besides "
            "its inputs (a value kept on the stepper, a global), so no check of it can vouch for the model's step."
        )

    s64, f64, y64, st64, t64, dt64 = _float64_copies(stepper, r.field, r.y, r.state, r.t, r.dt)
    y64 = _detached(y64)
    in_dtype = _exactly(f64)
    y_ctx = _detached(r.y)
    fresh = not claims.multistep
    with _random(r.rng), torch.no_grad():
        start64 = s64.init(f64, t64, y64) if fresh else st64
        reference = _flat(s64.step(f64, t64, y64, dt64, start64)[0])
    with _random(r.rng), r.modes.entered():
        start = stepper.init(in_dtype, r.t, y_ctx) if fresh else r.state
        ours = _flat(stepper.step(in_dtype, r.t, y_ctx, r.dt, start)[0]).detach().double()
    x64 = y64.x if isinstance(y64, PhaseState) else y64
    with _random(r.rng), torch.no_grad():
        reach = abs(float(dt64)) * field_size(f64, t64, x64)  # the size of the terms the step adds
    size = max(float(_flat(y64).abs().max()), float(reference.abs().max()), reach, 1e-300)
    with _random(r.rng):  # the same dropout masks as the reference's
        gain = amplification(copy.deepcopy(s64), f64, t64, y64, dt64, reference, eps, seed)
    if not math.isfinite(gain) or gain > th.BLOWN_UP:
        return {"blown_up": gain}  # the step is outside the scheme's stability region: rounding says nothing there
    judge(
        "values",
        float((ours - reference).abs().max()) / size,
        gain,
        f"its step in the model's dtype and modes (on the field evaluated exactly) differs from the same step in "
        f"float64 on copies{' from a fresh init' if fresh else ''}",
    )
    # the step the model took, on its own field: held to the same, plus what the field's own rounding moves it by
    with torch.no_grad():
        own = _field_error(r.field, f64, r.t, _detached(r.y), y64, t64, r)
    stages = max(1, claims.evals_per_step)
    judge(
        "values",
        float((recorded - reference).abs().max()) / size,
        gain,
        "the step the model took differs from the same step in float64 on copies",
        floor=judge.allowed(gain) + 4 * stages * own * reach / size * gain,
    )

    if fresh:  # the running state the model carried serves nothing y does not imply
        with _random(r.rng), torch.no_grad():
            carried = _flat(copy.deepcopy(s64).step(f64, t64, y64, dt64, st64)[0])
        judge(
            "one_step",
            float((carried - reference).abs().max()) / size,
            gain,
            "its step from the running state the model carried differs from one from a fresh init (a value carried "
            "between steps is kept in the model's dtype, or the step reads history: declare multistep = True)",
        )

    n = reference.numel()
    cot = _cotangent(n, seed)
    weights = _weights(f64)
    with _random(r.rng), r.modes.entered(grad=True):
        on_y, on_w, on_p = _grads(stepper, in_dtype, r.t, y_ctx, r.dt, r.state, cot, weights, fresh)
        nudged = _packed([(u.double() * (1 + eps)).to(u.dtype) for u in _parts(y_ctx)], y_ctx)
        _, w_again, p_again = _grads(stepper, in_dtype, r.t, nudged, r.dt, r.state, cot, weights, fresh)
    with _random(r.rng):
        ref_y, ref_w, ref_p = _grads(s64, f64, t64, y64, dt64, st64, cot, weights, fresh)
    magnitude = max(float(ref_y.abs().max()), float(cot.abs().max()))
    judge("gradients", float((on_y - ref_y).abs().max()) / magnitude, gain, "the gradient of its step with respect to "
          "the state differs from the float64 copies'")  # fmt: skip
    for what, on, ref, moved in (("the field's weights", on_w, ref_w, w_again), ("its own parameters", on_p, ref_p,
                                                                                p_again)):  # fmt: skip
        if on is None or ref is None:
            continue
        size_on = max(float(ref.abs().max()), 1e-300)
        spread = th.MODELLED_ROUNDING * float((moved - on).abs().max()) / (eps * size_on)
        judge(
            "gradients",
            float((on - ref).abs().max()) / size_on,
            max(gain, spread),
            f"the gradient of its step with respect to {what} differs from the float64 copies'",
        )

    if not claims.startup_evals:  # a start-up's count depends on where in its run the step is
        counted = _exactly(f64)
        counter = counted.attention if isinstance(counted, Block) else counted
        with _random(r.rng), r.modes.entered(grad=True):
            start = _detached(r.y, grad=True)
            stepper.step(counted, r.t, start, r.dt, stepper.init(counted, r.t, start) if fresh else r.state)
        if counter.calls != claims.evals_per_step:
            begun = "a fresh init" if fresh else "the running state the model carried"
            raise AssertionError(
                f"{name} (evaluations): declares evals_per_step = {claims.evals_per_step} on this field but a step "
                f"from {begun} with autograd on evaluated {'its attention' if counted is not counter else 'it'} "
                f"{counter.calls} times at {r}."
            )
        judge.worst["evaluations"] = counter.calls

    if claims.reversible:
        with _random(r.rng), torch.no_grad():
            back = _flat(s64.inverse(f64, t64, _unflat(reference, y64), dt64))
        defect = float((back - _flat(y64)).abs().max()) / size
        judge.worst["reversible"] = defect
        if not defect <= th.REVERSIBLE_RTOL * gain:
            raise AssertionError(
                f"{name} (reversible): its inverse of the float64 step misses the state by {defect:.3g} (relative; "
                f"REVERSIBLE_RTOL is {th.REVERSIBLE_RTOL:g}, times {gain:.3g}, how much the step amplifies rounding) "
                f"at {r}."
            )

    inside = _inside(stepper, float(t64), float(dt64))
    if order and fresh:
        judge.worst["continuity"] = _continuity_here(r, s64, f64, t64, y64, dt64, gain)
    if order and fresh and claims.order > 0:
        if inside:
            judge.worst["order"] = _local_order(r, s64, f64, t64, y64, dt64, claims.order)
            if math.isnan(judge.worst["order"]):
                judge.unresolved = "its error is below what float64 and the reference resolve"
        else:  # the model steps it from its domain's edge, where its limit is singular: no flow to compare with
            judge.worst["order"] = math.nan
            judge.unresolved = f"stepped from the edge of its time_domain {tuple(time_domain(stepper))} or outside it"
    if judge.unresolved is not None:
        judge.worst["order_unresolved"] = judge.unresolved
    return judge.worst


def _inside(stepper: AbstractStepper, t: float, dt: float) -> bool:
    """Whether the times a step from ``t`` over ``dt`` spans lie inside the stepper's open ``time_domain``."""
    low, high = time_domain(stepper)
    return low < min(t, t + dt) and max(t, t + dt) < high


def _deterministic(f64: Any) -> None:
    """The float64 copy of a field (a block's fields) in eval mode: dropout off (the copy is the check's own)."""
    from .._splitting import Block

    for part in f64 if isinstance(f64, Block) else (f64,):
        for module in _modules_in(part):
            module.eval()


def _continuity_here(r: Step, s64, f64, t64, y64, dt64, gain: float) -> float:
    """The step at the model's own ``dt`` and ``t`` is the limit of the steps around them (float64, eval mode;
    :func:`~solvers.testing.continuity.point_jump`): a scheme that takes another step at exactly the sizes and times a
    model uses (``dt = 1/2``, its first layer's ``t = 0``) is refined away from them by every other check. Returns the
    largest jump that rounding explains (relative)."""
    from .continuity import point_jump

    _deterministic(f64)
    t, dt = float(t64), float(dt64)
    size = max(float(_flat(y64).abs().max()), 1e-300)
    worst = 0.0

    def at_time(u: float) -> Any:
        if not _inside(s64, u, dt):  # outside the times it is defined on: not judged there
            raise ValueError(u)
        return _fresh_step(copy.deepcopy(s64), f64, u, y64, dt)

    for what, fn, x in (("dt", lambda u: _fresh_step(copy.deepcopy(s64), f64, t, y64, u), dt), ("t", at_time, t)):
        jump = point_jump(fn, x, max(abs(dt), 1.0) / 4) / size
        if not jump <= th.ONE_STEP_RTOL * max(1.0, gain):
            raise AssertionError(
                f"{_name(r.stepper)} (continuity): the step at the model's own {what} = {x:g} is not the limit of the "
                f"steps around it: it jumps by {jump:.3g} (relative; still that after {th.CONTINUITY_LEVELS} halvings "
                f"of the distance) at {r}: the scheme takes another step at exactly this size or time."
            )
        worst = max(worst, jump)
    return worst


def _field_error(field: Any, f64: Any, t: Any, y: Any, y64: Any, t64: Any, step: Step) -> float:
    """How far the model's own field (in its dtype, autocast as the step ran) is from its float64 copy at the step's
    start, relative to the copy's size: the largest over a block's fields."""
    from .._splitting import Block

    x = y.x if isinstance(y, PhaseState) else y
    x64 = y64.x if isinstance(y64, PhaseState) else y64
    if isinstance(field, Block):
        pairs = [(field.attention, f64.attention)] + ([(field.ffn, f64.ffn)] if field.ffn is not None else [])
    else:
        pairs = [(field, f64)]
    worst = 0.0
    for f, g in pairs:
        with _random(step.rng), step.modes.entered(grad=False):  # from the step's random state: the same masks
            value = f(t, x)
        with _random(step.rng):
            exact = g(t64, x64)
        size = max(float(exact.abs().max()), 1e-300)
        worst = max(worst, float((value.double() - exact).abs().max()) / size)
    return worst


def _singular_limit(r: Step, s64, f64, t64, y64, dt64, error: BaseException | None) -> str:
    """The message for a limit whose flow from the model's step cannot be integrated: a singular time of the dynamics
    the scheme claims (named, with how to state where it is defined), or a limit that breaks where it is finite."""
    what = f"raised {type(error).__name__}" if error is not None else "was not finite"
    singular = singular_time(s64, f64, t64, y64, dt64)
    if singular is not None:
        return (
            f"{_name(r.stepper)} (order): its limit field is not finite at t = {singular:.6g}, a singular time of the "
            f"dynamics it claims, and the model steps it there ({r}); a scheme defined only on some times states "
            "them, e.g. time_domain = (0.0, math.inf), and a step from the domain's edge is not judged by its order."
        )
    return (
        f"{_name(r.stepper)} (order): the flow of its limit_field from the model's step {what} where that field is "
        f"finite ({r}): limit_field breaks on this model's states."
    )


MAX_HALVINGS = 14
"""The most halvings of the model's ``dt`` the in-model order check takes before it judges the slope it has."""


def _local_order(r: Step, s64, f64, t64, y64, dt64, order: int) -> float:
    """The slope of the one-step error against the limit's flow on the real field (float64, eval mode) as the step is
    refined from the model's ``dt``, halving it until the error settles (its last two local slopes within ``STEADY``
    of each other), nears rounding, or :data:`MAX_HALVINGS` halvings: at least ``order + 1`` within
    ``ORDER_TOLERANCE`` over the finest three steps above rounding; returns it (``nan`` where fewer than three steps
    lie above rounding). A trained or freshly drawn field is often stiff at the model's own ``dt``, so the error's
    slope there is still rising toward its order: it is read where it has settled, not at a fixed depth."""
    from .references import _classic_rk4

    _deterministic(f64)
    try:
        limit = s64.limit_field(f64)
    except ValueError:
        return math.nan
    size = max(float(_flat(y64).abs().max()), 1e-300)
    hs, errors = [], []
    with torch.no_grad():
        for k in range(1, MAX_HALVINGS + 1):
            h = float(dt64) * 2.0**-k
            step = _flat(_fresh_step(copy.deepcopy(s64), f64, t64, y64, h))
            try:
                coarse, middle, fine = (_flat(_classic_rk4(limit, y64, h, n, n, float(t64))[0]) for n in (4, 8, 16))
            except (ArithmeticError, ValueError, RuntimeError) as error:
                raise AssertionError(_singular_limit(r, s64, f64, t64, y64, dt64, error)) from None
            # Richardson: the reference's dt⁴ terms cancel, leaving dt⁶ ones; the coarser pair's extrapolation is
            # some 32 times further from the flow, so its distance to the finer one bounds the reference's own error
            flow = fine + (fine - middle) / 15
            doubt = float((middle + (middle - coarse) / 15 - flow).abs().max()) / size
            error = float((step - flow).abs().max()) / size
            if not math.isfinite(error) or not math.isfinite(doubt):
                raise AssertionError(_singular_limit(r, s64, f64, t64, y64, dt64, None))
            if not error > th.ABOVE_FLOOR * th.EPS:
                break
            if not error > doubt:  # the reference's error is not far below the step's: this size says nothing
                if errors:  # a scheme of higher order than the reference's dt⁶: the finer sizes say less still
                    break
                continue
            hs.append(abs(h))
            errors.append(error)
            if len(errors) >= th.GRIDS + 1 and k >= th.GRIDS + 2:  # at least the halvings a fixed ladder took
                local = [math.log(errors[i - 1] / errors[i]) / math.log(hs[i - 1] / hs[i]) for i in (-2, -1)]
                if abs(local[0] - local[1]) <= th.STEADY:
                    break
    if len(errors) < th.GRIDS:
        return math.nan
    x = torch.tensor([math.log(h) for h in hs[-th.GRIDS :]], dtype=torch.float64)
    e = torch.tensor([math.log(v) for v in errors[-th.GRIDS :]], dtype=torch.float64)
    x = x - x.mean()
    slope = float((x * (e - e.mean())).sum() / (x * x).sum())
    if not slope >= order + 1 - th.ORDER_TOLERANCE:
        shown = ", ".join(f"{v:.1e}@{h:.1e}" for h, v in zip(hs, errors))
        raise AssertionError(
            f"{_name(r.stepper)} (order): declares order {order}, so its one-step error on the model's field must fall "
            f"like dt^{order + 1} at least, but it falls like dt^{slope:.2f} (error@dt: {shown}) at {r}: the scheme "
            "takes another path on this model's states or field."
        )
    return slope


def check_in_model(
    model: nn.Module,
    batch: Any,
    forward: Callable[[nn.Module, Any], Any] | None = None,
    order: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the model's forward pass on ``batch`` as training runs it and check every claim of every step its depth
    loop takes, on its real fields and states, against the same computation in float64 on deep copies (see the module
    doc for each claim). ``forward(model, batch)`` replaces the call (default: ``model(batch)``, ``model(*batch)`` for
    a tuple, ``model(**batch)`` for a dict); wrap the call in the autocast, thread count or deterministic mode
    training runs in, and those are the modes checked. ``order=False`` leaves out the local order (its reference
    integrates the limit on the real field: the costliest part). Raises ``AssertionError`` naming the step, the claim
    and the numbers, with the line that runs it again; returns ``{"steps": n, "claims": {claim: largest defect},
    "unjudged": [step index, ...], "order_unresolved": {step index: why}}``: the steps that amplify rounding more than
    ``BLOWN_UP`` (outside the scheme's stability region: no claim can be judged there, and none was), and those whose
    order could not be measured (every other claim was judged on them).

    The model's depth loop must be :func:`solvers.iterate` (or drive its steps through it): a model that steps its
    layers otherwise has no step recorded, which is an error saying so."""
    steps = record_steps(model, batch, forward)
    if not steps:
        raise AssertionError(
            f"{type(model).__name__}'s forward pass took no step through solvers.iterate: check_in_model observes the "
            "depth loop there (drive the layers' steps through solvers.iterate, or pass forward=...)."
        )
    worst: dict[str, float] = {}
    unjudged: list[int] = []
    unresolved: dict[int, str] = {}
    for r in steps:
        try:
            with _one_thread():  # the references' small ops: one thread (a replay sets the model's own count)
                found = _check_step(r, order, seed + r.index)
        except AssertionError as error:
            again = f"solvers.testing.check_in_model(model, batch{', order=False' if not order else ''}, seed={seed})"
            raise AssertionError(f"{error}\n  reproduce with: {again}") from None
        if "blown_up" in found:
            unjudged.append(r.index)
            continue
        if "order_unresolved" in found:
            unresolved[r.index] = found.pop("order_unresolved")
        for claim, value in found.items():
            if isinstance(value, float) and math.isnan(value):
                continue
            worst[claim] = max(worst.get(claim, 0.0), value)
    return {"steps": len(steps), "claims": worst, "unjudged": unjudged, "order_unresolved": unresolved}
