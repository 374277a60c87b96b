"""The stepper interface: a residual stack is an explicit time-stepper.

A depth-``L`` residual network computes ``x_{l+1} = x_l + F_l(x_l)``. Read ``F_l = dt * f(t_l, x)`` and this is the
explicit Euler method for ``dx/dt = f(t, x)`` with step ``dt``: layer index is time, and a layer is one step. Every
other choice of how to combine the layer's *field* ``f`` with the running state is another integrator, and this
package makes that choice a value rather than an architecture.

Two kinds of dynamics
---------------------
*First-order* steppers integrate ``dx/dt = f(t, x)``; their state ``y`` is a plain ``Tensor``.

*Second-order* steppers integrate ``d²x/dt² = a(t, x)``; their state ``y`` is a :class:`PhaseState` ``(x, v)`` and the
field they are given is the *acceleration*. With attention as the field, ``a(X) = (A(X) - I) X`` is the wave equation
on the complete graph of tokens, and semi-implicit Euler on it is the Wavy Transformer's update::

    v <- v + dt * a(x)        # kick
    x <- x + dt * v           # drift

Eliminating ``v`` gives the two-step Störmer recurrence ``x_{n+1} = 2 x_n - x_{n-1} + dt² a(x_n)``. "Leapfrog" names
several methods in the literature; here ``leapfrog`` means exactly that two-step recurrence (see ``_leapfrog.py``).

The protocol
------------
::

    state = stepper.init(field, t0, y0)                 # once, before the first step
    y1, state = stepper.step(field, t, y, dt, state)    # one step of size dt from time t

    y = stepper.inverse(field, t, y1, dt)               # reversible schemes only: the y that step took to y1

``state`` is whatever the scheme carries between steps besides ``y``: a two-step method's history, a cached force for
first-same-as-last reuse, or ``None``. Pass back what ``step`` returned. The field may change from one step to the
next (one field per layer).

The loop over depth is :func:`run_steps`, and every driver runs it: :func:`iterate` checks its arguments first,
:func:`integrate` keeps the last state, :func:`trajectory` every state, the models' backbones run it with one stepper
and one field per layer, each layer's own step and an optional hook that takes each step (activation
checkpointing), and :func:`~solvers.integrate_reversible` runs it without recording and rebuilds the states in the
backward pass with ``inverse``. A model's layer is stepped by a *block stepper* (:class:`~solvers.Split`,
:class:`~solvers.Whole`, ``_splitting.py``) whose field is a :class:`~solvers.Block` of the layer's two fields
(attention and FFN), and whose claims follow from its parts (a fourth-order stepper under Lie splitting makes a
first-order layer; :func:`solvers.testing.check_layer` measures it).

Declarations
------------
A stepper's claims are one value, a frozen :class:`Claims` record returned by :meth:`AbstractStepper.claims`;
:mod:`solvers.testing` proves each one:

``order``           global order of convergence to the limit dynamics (``limit_field``) as ``dt -> 0``; ``0`` declares
                    that there is none (a part of the step that does not shrink with ``dt``).
``second_order``    ``True`` if ``y`` is a :class:`PhaseState` and the field is an acceleration.
``symplectic``      one step is a symplectic map of ``(x, v)`` for ``x'' = -K x`` (unit Jacobian determinant, bounded
                    energy error shrinking like ``dt**order``).
``reversible``      a step can be undone exactly: ``inverse(field, t, y1, dt)`` returns the ``y`` that ``step`` (from a
                    fresh ``init``) took to ``y1``, up to rounding. A network of such steps can rebuild its states in
                    the backward pass instead of storing them.
``evals_per_step``  field evaluations in one step (from a fresh ``init``, unless ``startup_evals`` says otherwise).
``fsal``            (optional, default ``False``) "first same as last": when consecutive steps use the same field, one
                    evaluation is reused, so such steps cost ``evals_per_step - 1``.
``multistep``       (optional, default ``False``) the step reads history (an earlier position) from ``state``, so its
                    result depends on more than ``y``; a one-step scheme's ``state`` may only cache what ``y`` implies.
``startup_evals``   (optional, default ``()``; multistep schemes) the evaluations of the first steps after ``init``
                    where they differ from ``evals_per_step`` (a start-up scheme builds the history: an Adams–Bashforth
                    method started by two Heun steps declares ``(2, 2)`` and ``evals_per_step = 1``).
``symmetric``       (optional, default ``False``) time-symmetric: ``step(-dt)`` undoes ``step(dt)`` (Hairer, Lubich &
                    Wanner, §V.1). A symmetric scheme is reversible, and its inverse is that backward step, so it
                    need not write ``inverse``; any other reversible scheme writes its own.

A fixed scheme declares them as class variables, which the default :meth:`~AbstractStepper.claims` reads and which
are checked when the class is made. A stepper whose claims follow from its parts or its coefficients (the gated mix
from its wave and diffusion steppers, a tableau from its coefficients, a block stepper from its stepper, FFN scheme,
splitting and the block it steps) overrides ``claims`` and computes the record; a claim that a subclass states in its
own body is kept over the computed one, so the kit proves or refutes it as any scheme's. Where the claims depend on
the field (a block with or without an FFN, with or without maps), ``claims(field)`` says what the stepper claims on
that field, as diffrax's ``order(terms)`` does. On an instance, ``stepper.order`` is ``stepper.claims().order``
either way.
No class is made at run time: ``type(stepper)`` is the class it was constructed as.

The limit dynamics
------------------
Most schemes converge to the flow of the field they are given. Some parametrised ones converge to a modified flow, and
say so through :meth:`AbstractStepper.limit_field`: heavy-ball momentum with fixed ``lam`` converges to
``dx/dt = f / (1 - lam)``; the damped wave to ``x' = v, v' = a - gamma v``; the gated mix to
``x' = lam v + (1 - lam) a, v' = a``. The order test measures convergence to that flow, so a new scheme with its own
limit only overrides this one method. In a split layer another sub-step (the FFN) acts between two steps; by default
the layer's limit adds it, ``x' = L[f] + g``. A first-order multistep scheme whose history records that sub-step too
(heavy ball keeps the previous position, so the FFN's displacement enters its momentum) says so with an optional
method ``limit_with_substep(field, substep)`` returning the layer's limit (heavy ball: ``(f + g) / (1 - lam)``);
:func:`solvers.testing.check_layer` measures the layer against it.

Learnable scheme parameters (a momentum, a gate, a damping rate) are ``nn.Parameter``s of the stepper; a model builds
one stepper per layer, so each layer learns its own.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple, Union

import torch
from torch import Tensor, nn

Field = Callable[[Any, Tensor], Tensor]
"""``field(t, x) -> Tensor``: ``dx/dt`` for first-order steppers, the acceleration for second-order ones."""


class PhaseState(NamedTuple):
    """Position ``x`` and velocity ``v`` of a second-order system; both have the same shape."""

    x: Tensor
    v: Tensor


Y = Union[Tensor, PhaseState]  # noqa: UP007 - a runtime alias, also valid on Python 3.9 tools
"""The state a step advances: a ``Tensor`` for first-order steppers, a :class:`PhaseState` for second-order ones."""

Time = Union[float, Tensor]  # noqa: UP007
"""A time: where a step starts (``t``), a number or a scalar tensor."""

StepSize = Union[float, Tensor]  # noqa: UP007
"""A step ``dt``: a number or a scalar tensor (negative only in a symmetric scheme's inverse)."""

Carry = Any
"""What a scheme carries from one step to the next besides ``y`` (a history, a cached force, or ``None``)."""

DECLARATIONS = ("order", "second_order", "symplectic", "reversible", "evals_per_step")
"""The class variables every concrete stepper declares (the optional ones have defaults on :class:`AbstractStepper`)."""


@dataclass(frozen=True)
class Claims:
    """Every claim a stepper makes, as one typed value (the meaning of each: the module docstring)."""

    order: int
    second_order: bool
    symplectic: bool
    reversible: bool
    evals_per_step: int
    fsal: bool = False
    multistep: bool = False
    symmetric: bool = False
    startup_evals: tuple[int, ...] = ()

    @classmethod
    def declared(cls, owner: type) -> Claims:
        """The claims a class declares as class variables (the optional ones default to the record's defaults)."""
        values = {name: getattr(owner, name) for name in CLAIMS}
        return cls(**{**values, "startup_evals": tuple(values["startup_evals"])})

    @classmethod
    def of(cls, stepper: AbstractStepper | type[AbstractStepper]) -> Claims:
        """What a stepper claims, or a stepper class: the class variables it declares, or, for a class whose claims
        are computed (from parts, from coefficients), what an instance made with no arguments claims."""
        if isinstance(stepper, AbstractStepper):
            return stepper.claims()
        if stepper.claims is AbstractStepper.claims:
            return cls.declared(stepper)
        return stepper().claims()


CLAIMS = tuple(f.name for f in fields(Claims))
"""The names of every claim: the required :data:`DECLARATIONS`, then the optional ones."""


def stated(stepper: AbstractStepper, owner: type) -> dict[str, Any]:
    """The claims that subclasses of ``owner`` state in their own bodies, for an instance of one: a stepper that
    computes its claims keeps these over the computed ones (a subclass written to claim something else), so the kit
    proves or refutes them."""
    out: dict[str, Any] = {}
    for c in reversed(type(stepper).__mro__):
        if c is not owner and issubclass(c, owner):
            out.update({name: c.__dict__[name] for name in CLAIMS if name in c.__dict__})
    if "startup_evals" in out:
        out["startup_evals"] = tuple(out["startup_evals"])
    return out


class AbstractStepper(nn.Module):
    """Base class of every integrator; subclass it for your own scheme (see ``docs/extending.md``).

    A subclass implements :meth:`step` (and :meth:`init` if it carries state between steps) and declares its claims:
    the class variables below, or a :meth:`claims` method that computes them. It must be constructible with no
    arguments. An intermediate base class that declares nothing yet says so: ``class MyFamily(AbstractStepper,
    abstract=True)``.
    """

    order: ClassVar[int]
    second_order: ClassVar[bool]
    symplectic: ClassVar[bool]
    reversible: ClassVar[bool]
    evals_per_step: ClassVar[int]
    fsal: ClassVar[bool] = False
    multistep: ClassVar[bool] = False
    symmetric: ClassVar[bool] = False
    startup_evals: ClassVar[tuple[int, ...]] = ()
    time_invariant: ClassVar[bool] = True
    """Whether a step commutes with shifting the time wherever its limit does (it reads the time only through its
    field and its limit's own terms): what the kit assumes unless a scheme says ``False`` (a step that reads the
    absolute time in terms that vanish with ``dt``, a geometric-mean stage time); then a far start is compared with
    the reference where it runs and the order is measured there."""
    scale_invariant: ClassVar[bool] = True
    """The same for scaling the state and the field by a power of two."""
    steps_on_blocks: ClassVar[bool] = False
    """Whether ``step`` takes a :class:`~solvers.Block` (a layer's attention and FFN) for its field rather than one
    vector field: a block stepper (``Split``, ``Whole``, or one of your own), which the kit checks on blocks."""

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "claims" in cls.__dict__:  # claims computed per instance: ``stepper.order`` reads ``stepper.claims()``
            for name in CLAIMS:
                if name not in cls.__dict__:
                    setattr(cls, name, _Computed(name))
        if abstract:
            return
        if cls.claims is not AbstractStepper.claims:
            return  # computed claims: the kit checks them on instances
        missing = [name for name in DECLARATIONS if not hasattr(cls, name)]
        if missing:
            raise TypeError(
                f"{cls.__name__} must declare the class variable(s) {', '.join(missing)} (or compute its claims in a "
                f"claims() method); every stepper declares {', '.join(DECLARATIONS)}."
            )
        check_reversible_declaration(cls)

    # -- protocol -------------------------------------------------------------------------------------------------

    def claims(self, field: Field | None = None) -> Claims:
        """What this stepper claims (on ``field``, for a stepper whose claims depend on what it steps; ``None``: its
        usual field). The default: the class variables."""
        return Claims.declared(type(self))

    def init(self, field: Field, t0: Time, y0: Y) -> Carry:
        """Validate ``y0`` and return the state for the first step (``None`` for one-step schemes)."""
        self._unpack(y0)
        return None

    def step(self, field: Field, t: Time, y: Y, dt: StepSize, state: Carry) -> tuple[Y, Carry]:
        """Advance ``y`` from ``t`` to ``t + dt``; return ``(y1, state1)``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step(field, t, y, dt, state).")

    def forward(self, field: Field, t: Time, y: Y, dt: StepSize, state: Carry) -> tuple[Y, Carry]:
        """Alias of :meth:`step`, so hooks and ``torch.func.functional_call`` see one step."""
        return self.step(field, t, y, dt, state)

    def inverse(self, field: Field, t: Time, y1: Y, dt: StepSize) -> Y:
        """The ``y`` with ``step(field, t, y, dt, init(field, t, y))[0] == y1`` (schemes that declare ``reversible``).

        The default serves ``symmetric`` schemes: one step of ``-dt`` from ``t + dt``, from a fresh ``init``.
        """
        if not self.symmetric:
            raise NotImplementedError(f"{type(self).__name__} is not reversible: it has no inverse.")
        y, _ = self.step(field, t + dt, y1, -dt, self.init(field, t + dt, y1))
        return y

    def continues(self, previous: AbstractStepper) -> bool:
        """Whether this stepper takes over the running ``state`` that ``previous`` returned (in a schedule, the
        stepper of the step before). The default: the same class (a two-step scheme's history carries across
        layers that each have their own instance)."""
        return type(self) is type(previous)

    def limit_field(self, field: Field) -> Callable[[Time, Y], Y]:
        """The first-order vector field whose flow this stepper approximates to ``order`` as ``dt -> 0``.

        For first-order steppers it maps ``(t, x)`` to ``dx/dt``; for second-order ones ``(t, PhaseState)`` to
        ``PhaseState(dx/dt, dv/dt)``. The default is the field itself (``x' = f``), resp. ``x' = v, v' = a``.
        """
        if self.second_order:
            return lambda t, y: PhaseState(y.v, field(t, y.x))
        return field

    # -- helpers for subclasses -----------------------------------------------------------------------------------

    def _unpack(self, y: Any) -> Any:
        """Return ``y`` (a ``PhaseState`` or a ``Tensor``, as this stepper needs) or raise a one-line error."""
        name = type(self).__name__
        if self.second_order:
            if not isinstance(y, PhaseState):
                raise TypeError(
                    f"{name} is a second-order stepper: y must be solvers.PhaseState(x, v), got {type(y).__name__}; "
                    "wrap a position as PhaseState(x, torch.zeros_like(x))."
                )
            if not (isinstance(y.x, Tensor) and isinstance(y.v, Tensor)):
                raise TypeError(f"{name}: PhaseState fields x and v must be Tensors.")
            if y.x.shape != y.v.shape:
                raise ValueError(
                    f"{name}: PhaseState x and v must have the same shape, got x {tuple(y.x.shape)} "
                    f"and v {tuple(y.v.shape)}."
                )
            return y
        if isinstance(y, PhaseState):
            raise TypeError(
                f"{name} is a first-order stepper: y must be a Tensor, got a PhaseState; "
                "pass y.x, or use a second-order stepper such as semi_implicit_euler."
            )
        if not isinstance(y, Tensor):
            raise TypeError(f"{name}: y must be a Tensor, got {type(y).__name__}.")
        return y


class _Computed:
    """A claim of a stepper that computes its claims: on an instance, that claim of ``claims()``; on the class, that
    of an instance made with no arguments (a class that needs arguments, such as a block stepper, has none)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is not None:
            return getattr(instance.claims(), self.name)
        try:
            made = owner()
        except TypeError:
            raise AttributeError(
                f"{owner.__name__} computes its claims from its parts: read {self.name} from an instance."
            ) from None
        return getattr(made.claims(), self.name)


def transforms_active() -> bool:
    """Whether a ``torch.func`` transform (``jvp``, ``vmap``, ``grad``, ...) or a forward-mode AD level is active:
    custom autograd Functions that have reverse-mode rules only step aside for their plain formulas then."""
    return torch._C._are_functorch_transforms_active() or torch.autograd.forward_ad._current_level >= 0


def check_reversible_declaration(cls: type) -> None:
    """The ``reversible`` family of declarations must agree with what the class implements (a one-line TypeError)."""
    name = cls.__name__
    if getattr(cls, "symmetric", False) and not getattr(cls, "reversible", False):
        raise TypeError(f"{name} declares symmetric, so step(-dt) is its inverse: declare reversible = True as well.")
    if not getattr(cls, "reversible", False):
        return
    if getattr(cls, "multistep", False):
        raise TypeError(
            f"{name} declares reversible and multistep: an inverse from y1 alone needs a one-step scheme; "
            "drop one of the two declarations."
        )
    if not getattr(cls, "symmetric", False) and cls.inverse is AbstractStepper.inverse:
        raise TypeError(
            f"{name} declares reversible but neither writes inverse(field, t, y1, dt) nor declares symmetric "
            "(whose inverse is step(-dt))."
        )


def sigmoid_gate(dim: int | None, theta0: float) -> Tensor:
    """Logit ``theta`` of a gate ``lam = sigmoid(theta)``: a learnable ``(dim,)`` parameter, or a fixed scalar."""
    if math.isnan(theta0) or theta0 == math.inf:
        raise ValueError(f"theta0 must be a number or -inf (gate exactly 0), got {theta0}.")
    if dim is None:
        return torch.tensor(float(theta0))
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive int (one learnable value per channel) or None, got {dim!r}.")
    return nn.Parameter(torch.full((dim,), float(theta0)))


def axpy(x: Tensor, dt: float | Tensor, f: Tensor) -> Tensor:
    """``x + dt * f``, as one kernel when ``dt`` is a number (the update every explicit step makes)."""
    if isinstance(dt, (int, float)):
        return torch.add(x, f, alpha=dt)
    return x + dt * f


def register(module: nn.Module, name: str, value: Tensor) -> None:
    """Attach ``value`` as a parameter if it is one, else as a (non-learnable) buffer."""
    if isinstance(value, nn.Parameter):
        module.register_parameter(name, value)
    else:
        module.register_buffer(name, value)


def _check_dt(dt: Any) -> None:
    if isinstance(dt, Tensor):
        if dt.numel() != 1:
            raise ValueError(f"dt must be a scalar, got a tensor of shape {tuple(dt.shape)}.")
        if dt.device.type != "cpu":  # checking the value would synchronise with the device
            return
        value = float(dt.detach())
    elif isinstance(dt, (int, float)) and not isinstance(dt, bool):
        value = float(dt)
    else:
        raise TypeError(f"dt must be a positive finite number or a scalar tensor, got {type(dt).__name__}.")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"dt must be positive and finite, got {value}.")


def _per_step(stepper: AbstractStepper | Sequence[AbstractStepper], fields: Sequence[Any]) -> Sequence[AbstractStepper]:
    if not isinstance(fields, (list, tuple, nn.ModuleList)):
        raise TypeError(
            f"fields must be a list of callables, one per step, got {type(fields).__name__}; "
            "for n steps of one field pass [field] * n."
        )
    if len(fields) == 0:
        raise ValueError("fields is empty: integrate takes one field per step, at least one.")
    if isinstance(stepper, AbstractStepper):
        return [stepper] * len(fields)
    steppers = list(stepper)
    if len(steppers) != len(fields):
        raise ValueError(f"got {len(steppers)} steppers for {len(fields)} fields; pass one stepper, or one per field.")
    for s in steppers:
        if not isinstance(s, AbstractStepper):
            raise TypeError(f"steppers must be solvers.AbstractStepper instances, got {type(s).__name__}.")
    return steppers


def _per_step_dt(dt: Any, steppers: Sequence[AbstractStepper]) -> list[Any]:
    """``dt`` for every step: one value for all, or a sequence with one per step, each checked."""
    steps = len(steppers)
    if isinstance(dt, (list, tuple)):
        if len(dt) != steps:
            raise ValueError(f"got {len(dt)} step sizes for {steps} steps; pass one dt, or one per step.")
        dts = list(dt)
    else:
        dts = [dt] * steps
    for d in dts:
        _check_dt(d)
    return dts


def y_for(stepper: AbstractStepper, y: Y) -> Y:
    """``y`` in the form ``stepper`` takes, for schedules that switch between first- and second-order steppers.

    A Tensor entering a second-order stepper gets ``v = 0`` (a wave segment starts at rest, as Wavy's ``v0 = 0``); a
    ``PhaseState`` entering a first-order stepper keeps ``x`` and drops ``v``; anything else is returned unchanged.
    """
    if stepper.second_order and not isinstance(y, PhaseState):
        return PhaseState(y, torch.zeros_like(y))
    if not stepper.second_order and isinstance(y, PhaseState):
        return y.x
    return y


Hook = Callable[[AbstractStepper, Any, Any, Y, Any, Any], tuple[Y, Any]]
"""``hook(stepper, field, t, y, dt, state) -> (y1, state1)``: takes one step in place of ``stepper.step`` (to
checkpoint it, time it, log it); it must return what ``stepper.step(field, t, y, dt, state)`` returns."""


def _take(stepper: AbstractStepper, field: Any, t: Any, y: Y, dt: Any, state: Any) -> tuple[Y, Any]:
    return stepper.step(field, t, y, dt, state)


# -- observing the loop ------------------------------------------------------------------------------------------------

Observer = Callable[..., tuple[Y, Any]]
"""``observer(take, stepper, field, t, y, dt, state) -> (y1, state1)``: takes each step :func:`iterate` takes, by
calling ``take(stepper, field, t, y, dt, state)`` (the step, or the driver's hook) and returning what it returns; it
sees what the step was given, the random state and modes before it, and what it returned."""

_OBSERVERS: list[Observer] = []


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Within it, every step :func:`iterate` takes goes through ``observer`` (see :data:`Observer`), whatever drives
    the loop (a model's forward pass included), around the driver's own hook if it has one; outside, the loop is as
    it was (nothing is looked up per step). The property kit's ``check_in_model`` records a model's steps so."""
    _OBSERVERS.append(observer)
    try:
        yield
    finally:
        _OBSERVERS.remove(observer)


def _observed(take: Hook, observer: Observer) -> Hook:
    def observed(stepper: AbstractStepper, field: Any, t: Any, y: Y, dt: Any, state: Any) -> tuple[Y, Any]:
        return observer(take, stepper, field, t, y, dt, state)

    return observed


def iterate(
    stepper: AbstractStepper | Sequence[AbstractStepper],
    fields: Sequence[Any],
    y0: Y,
    dt: Any,
    t0: Any = 0.0,
    hook: Hook | None = None,
) -> Iterator[Y]:
    """Yield the state after each step: :func:`run_steps`, the one loop over depth, after checking its arguments.

    ``stepper`` is one stepper or one per step; ``dt`` one step size or one per step (each checked: positive and
    finite); ``hook`` (optional) takes each step in place of ``stepper.step`` (activation checkpointing, timing).
    """
    steppers = _per_step(stepper, fields)
    return run_steps(steppers, fields, y0, _per_step_dt(dt, steppers), t0, hook)


def run_steps(
    steppers: Sequence[AbstractStepper],
    fields: Sequence[Any],
    y0: Y,
    dts: Sequence[Any],
    t0: Any = 0.0,
    hook: Hook | None = None,
) -> Iterator[Y]:
    """The one loop over depth, which every driver runs (:func:`iterate`, :func:`integrate`, :func:`trajectory`, a
    model's backbone, a generated token's pass, the property kit): yield the state after each step.

    One stepper, one field and one step size per step, as given (a model's layers check their steps once, when they
    are built; :func:`iterate` checks them for any other caller); step ``i`` starts at ``t0 + dts[0] + ... +
    dts[i-1]``, and ``y0`` is in the form the first stepper takes. ``hook`` (optional) takes each step in place of
    ``stepper.step``. Consecutive steps by steppers that :meth:`~AbstractStepper.continues` the previous one share the
    scheme's running state (each layer of a model has its own stepper instance with its own parameters, but one
    running history); at any other change the new stepper starts afresh from ``init``, and where a schedule switches
    between first- and second-order steppers the velocity starts at zero on entry and is dropped on exit
    (:func:`y_for`).
    """
    take = _take if hook is None else hook
    for observer in _OBSERVERS:  # observers (:func:`observing`) take each step around the driver's hook
        take = _observed(take, observer)
    y, t, state, previous = y0, t0, None, None
    for s, f, h in zip(steppers, fields, dts):
        if previous is None or not s.continues(previous):
            if previous is not None:
                y = y_for(s, y)
            state = s.init(f, t, y)
        y, state = take(s, f, t, y, h, state)
        t = t + h
        previous = s
        yield y


def integrate(
    stepper: AbstractStepper | Sequence[AbstractStepper],
    fields: Sequence[Any],
    y0: Y,
    dt: Any,
    t0: Any = 0.0,
    hook: Hook | None = None,
) -> Y:
    """Take one step per field, starting from ``y0`` at ``t0``; return the final state.

    ``stepper`` is one stepper or a sequence of them, one per field (hybrid schedules); ``dt`` one step size or one
    per step. For weight tying pass the same field several times: ``integrate(stepper, [f] * depth, y0, dt)``.
    """
    return deque(iterate(stepper, fields, y0, dt, t0, hook), maxlen=1)[0]  # keeps only the last state alive


def trajectory(
    stepper: AbstractStepper | Sequence[AbstractStepper],
    fields: Sequence[Any],
    y0: Y,
    dt: Any,
    t0: Any = 0.0,
    hook: Hook | None = None,
) -> list[Y]:
    """Like :func:`integrate` but return ``[y0, y1, ..., yL]``."""
    return [y0, *iterate(stepper, fields, y0, dt, t0, hook)]
