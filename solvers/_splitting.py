"""A layer as one step over a pair of fields: splittings of an attention field and an FFN field, and the whole block.

A transformer layer has two sublayers. Read each as a vector field, ``F_a`` (attention) and ``F_f`` (the FFN), and
the layer is one step of size ``dt`` for the block's ODE ``x' = F_a(x) + F_f(x)`` (or, for a second-order stepper,
``x'' = F_a(x)`` with the FFN acting on the state and, by the chain rule, on the velocity). The field a layer's
stepper receives is a :class:`Block`: the two fields and, optionally, a map applied to the state after each sublayer
(a post-norm layout: ``x <- LN(x + dt F(x))``). Two block steppers drive it:

:class:`Split` — ``stepper`` takes one step on ``F_a``; the FFN enters as a sub-step of size ``ffn_dt`` (default
``dt``) by the scheme ``ffn``:

- a first-order one-step scheme (default ``euler``): ``x <- x + h F_f(x)`` for a first-order state; for a
  second-order state ``(x, v)`` its *tangent lift*: the scheme on ``x`` and, on ``v``, the Jacobian of that very map
  (``v <- v + h J_{F_f}(x) v`` for Euler). For Runge–Kutta schemes this equals the scheme applied to the variational
  system ``x' = F_f(x), v' = J_{F_f}(x) v``, so any RK scheme may serve;
- a second-order scheme (e.g. ``semi_implicit_euler``): the FFN is a *force* of that scheme, a second kick and drift
  in the same layer (every sub-step invertible when the scheme is reversible: the ``reversible`` preset).

``splitting="lie"`` (Lie–Trotter): attention step, then the FFN sub-step; a first-order splitting, so the layer has
order ``min(1, ...)`` whatever the stepper. ``splitting="strang"``: half an FFN sub-step, the attention step, another
half; order ``min(2, order of stepper, order of ffn)`` — which needs an FFN scheme of order 2 (``heun``, the default
under Strang): two Euler halves make a first-order layer. A higher order than 2 is not offered by any splitting
here: it needs symmetric compositions with negative sub-steps (Yoshida), or :class:`Whole`.

:class:`Whole` — ``stepper`` takes one step on the summed field ``F_a + F_f`` (every stage evaluates both), so the
layer keeps the stepper's order.

The claims of a block stepper follow from its parts — the stepper, the FFN scheme, the splitting and the block it
steps (whether it has an FFN and maps): ``claims(block)`` computes them (``claims()``: on a block with an FFN and no
maps). ``order`` is
the layer's order of convergence to :meth:`limit_field` (``0`` when the layer has no small-step limit: a fixed
``ffn_dt``, a map after a sublayer, a stepper with a fixed-size part); ``reversible`` when every sub-step is
invertible and no map follows; ``fsal`` (first-same-as-last reuse) only where nothing acts between two of the
stepper's steps (no FFN, no map); ``evals_per_step`` and ``startup_evals`` count evaluations of the attention field,
the stepper's own.

The stepper is initialised at the state it first steps from: under Strang, after the first FFN half step (a
multistep scheme's start, e.g. heavy ball's ``x_{-1} = x_0``, is the attention step's own start).

The limit of a split layer with a first-order stepper is the stepper's limit on the attention field plus the FFN
sub-step's, ``x' = L[F_a] + F_f``, unless the stepper says how a sub-step taken between its steps enters its history
by a method ``limit_with_substep(field, substep)`` (see :func:`limit_with_substep`): heavy ball's history is the
previous position, which records the FFN's displacement too, so it converges to ``L[F_a + F_f]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ._base import AbstractStepper, Claims, Field, PhaseState, Y, axpy, stated
from ._euler import Euler
from ._heun import Heun
from ._jvp import differentiable_jvp

SPLITTINGS = ("lie", "strang")


class Block(NamedTuple):
    """What a layer's block stepper steps on: two fields and optional maps applied after each sublayer.

    ``attention(t, x)`` is the field of the layer's stepper (an acceleration for a second-order one); ``ffn(t, x)``
    a second field or ``None``. ``after_attention`` / ``after_ffn`` map the state after that sublayer (``None``: no
    map); a map is ``g(x) -> x`` with, for second-order states, ``g.joint(x, v) -> (g(x), J_g(x) v)`` (else
    ``torch.func.jvp`` is used). A field may offer ``joint(x, v) -> (f(x), J_f(x) v)`` the same way, or, if it
    depends on time, ``joint_at(t, x, v)``.
    """

    attention: Field
    ffn: Field | None = None
    after_attention: Callable[[Tensor], Tensor] | None = None
    after_ffn: Callable[[Tensor], Tensor] | None = None

    @property
    def maps(self) -> bool:
        return self.after_attention is not None or self.after_ffn is not None


def _joint(owner: Any, function: Callable[[Tensor], Tensor], x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(g(x), J_g(x) v)`` by ``owner.joint`` when it has one (a hand-written chain rule), else by forward-mode AD
    (:func:`~solvers.differentiable_jvp`: LayerNorm written out, so that training's derivatives of the velocity are
    right)."""
    joint = getattr(owner, "joint", None)
    return joint(x, v) if joint is not None else differentiable_jvp(function, x, v)


def tangent(g: Callable[[Tensor], Tensor], x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(g(x), J_g(x) v)`` for a map ``g(x)`` of the state (e.g. a post-norm LayerNorm)."""
    return _joint(g, g, x, v)


def apply_map(g: Callable[[Tensor], Tensor] | None, y: Y) -> Y:
    """The state after the map ``g``: ``g(x)``, or ``(g(x), J_g(x) v)`` for a ``PhaseState``."""
    if g is None:
        return y
    if isinstance(y, PhaseState):
        return PhaseState(*tangent(g, y.x, y.v))
    return g(y)


def _field_tangent(field: Field, t: Any, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(f(t, x), J_f(t, x) v)`` for a field: by its ``joint_at(t, x, v)`` (a time-dependent field's chain rule),
    an autonomous one's ``joint(x, v)``, else forward-mode AD."""
    timed = getattr(field, "joint_at", None)
    if timed is not None:
        return timed(t, x, v)
    return _joint(field, lambda z: field(t, z), x, v)


def _lifted_step(scheme: AbstractStepper, field: Field, t: Any, y: PhaseState, h: Any) -> PhaseState:
    """The tangent lift of a first-order one-step ``scheme``: the scheme on ``x``, its Jacobian on ``v``."""
    if type(scheme) is Euler:  # the common case, written out: two updates, no stacking
        dx, dv = _field_tangent(field, t, y.x, y.v)
        return PhaseState(axpy(y.x, h, dx), axpy(y.v, h, dv))
    z = torch.stack((y.x, y.v))  # (2, ...): the variational system's state

    def lifted(s, z):
        return torch.stack(_field_tangent(field, s, z[0], z[1]))

    z1, _ = scheme.step(lifted, t, z, h, scheme.init(lifted, t, z))
    return PhaseState(z1[0], z1[1])


def limit_with_substep(stepper: AbstractStepper, field: Field, substep: Field) -> Field:
    """The limit of a first-order ``stepper``'s steps on ``field`` with a sub-step on ``substep`` (of the same size)
    taken between every two of them, as in a split layer with the FFN.

    A stepper states how such a sub-step enters its history by a method ``limit_with_substep(field, substep)``; the
    default is that it does not: ``x' = L[field] + substep``, where ``L`` is :meth:`~AbstractStepper.limit_field`.
    That holds for every one-step scheme and for a multistep scheme whose history is the field (Adams–Bashforth); a
    scheme whose history is an earlier position (heavy ball) records the sub-step's displacement as well, and says so.
    """
    own = getattr(stepper, "limit_with_substep", None)
    if own is not None:
        return own(field, substep)
    limit = stepper.limit_field(field)
    return lambda t, x: limit(t, x) + substep(t, x)


class _Start:
    """The state a Strang layer's ``init`` returns: its stepper is initialised where it first steps, after the first
    FFN half step."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<start at the first step>"


_START = _Start()


class _Sum:
    """The whole block's field ``F_a + F_f`` (an object, so a scheme can tell one block's from another's)."""

    __slots__ = ("attention", "ffn")

    def __init__(self, attention: Field, ffn: Field):
        self.attention, self.ffn = attention, ffn

    def __call__(self, t: Any, x: Tensor) -> Tensor:
        return self.attention(t, x) + self.ffn(t, x)


def _sum(a: Y, b: Y) -> Y:
    if isinstance(a, PhaseState):
        return PhaseState(a.x + b.x, a.v + b.v)
    return a + b


class _BlockStepper(AbstractStepper, abstract=True):
    """Shared by :class:`Split` and :class:`Whole`: claims from the parts and the block, maps, state hand-over."""

    steps_on_blocks: ClassVar[bool] = True

    def __init__(self, stepper: AbstractStepper):
        super().__init__()
        if not isinstance(stepper, AbstractStepper):
            raise TypeError(f"a block stepper wraps a solvers.AbstractStepper, got {type(stepper).__name__}.")
        self.stepper = stepper

    def claims(self, field: Block | None = None) -> Claims:
        """What this block stepper claims on ``field`` (``None``: a block with an FFN and no maps)."""
        ffn, maps = (True, False) if field is None else (self._check(field).ffn is not None, field.maps)
        return replace(self.claims_on(ffn, maps), **stated(self, _BlockStepper))

    def claims_on(self, ffn: bool, maps: bool) -> Claims:
        """The claims of this layer on a block with or without an FFN and maps (the rule; see the module doc)."""
        raise NotImplementedError

    def _schemes(self) -> list[AbstractStepper]:
        return [s for s in (self.stepper, getattr(self, "ffn", None)) if s is not None]

    @property
    def time_invariant(self) -> bool:  # what its schemes state of themselves holds for the layer
        return all(s.time_invariant for s in self._schemes())

    @property
    def scale_invariant(self) -> bool:
        return all(s.scale_invariant for s in self._schemes())

    @property
    def time_domain(self) -> Any:
        """The times the layer is defined on: its schemes' ``time_domain`` where they state one (both stated: the
        interval they share), else ``None`` (every time)."""
        stated = [getattr(s, "time_domain", None) for s in self._schemes()]
        stated = [d for d in stated if d is not None]
        if len(stated) < 2:
            return stated[0] if stated else None
        (a, b), (c, d) = stated
        return max(a, c), min(b, d)

    def init(self, field, t0, y0):
        return self.stepper.init(self._check(field).attention, t0, y0)

    def continues(self, previous):
        return type(self) is type(previous) and self.stepper.continues(previous.stepper)

    @staticmethod
    def _check(block: Any) -> Block:
        if not isinstance(block, Block):
            raise TypeError(
                f"a block stepper steps on a solvers.Block(attention, ffn, ...), got {type(block).__name__}; "
                "for a single field use its stepper directly."
            )
        return block

    def _no_limit(self) -> ValueError:
        return ValueError(
            f"{self!r} has no small-step limit on this block (a fixed-size sub-step, a map after a sublayer, or a "
            "stepper with a fixed-size part), so it converges to no ODE as dt -> 0."
        )


class Split(_BlockStepper):
    """``stepper`` on the attention field, the FFN as a sub-step by ``ffn``; Lie or Strang (see module doc).

    ``Split(SemiImplicitEuler())`` is Full Wave's layer; ``Split(Euler())`` the pre-LN transformer's (with the
    residual form and ``dt = 1``); ``Split(SemiImplicitEuler(), ffn=SemiImplicitEuler())`` the reversible layer.
    """

    def __init__(
        self,
        stepper: AbstractStepper,
        ffn: AbstractStepper | None = None,
        splitting: str = "lie",
        ffn_dt: float | None = None,
    ):
        super().__init__(stepper)
        if splitting not in SPLITTINGS:
            raise ValueError(f"splitting must be one of {', '.join(SPLITTINGS)}; got {splitting!r}.")
        ffn = (Euler() if splitting == "lie" else Heun()) if ffn is None else ffn
        if not isinstance(ffn, AbstractStepper):
            raise TypeError(f"ffn must be a solvers.AbstractStepper (the FFN sub-step's scheme), got {ffn!r}.")
        if ffn.multistep:
            raise ValueError(f"the FFN sub-step must be a one-step scheme; {type(ffn).__name__} is multistep.")
        if ffn.second_order and not stepper.second_order:
            raise ValueError(
                f"the FFN can enter as a force ({type(ffn).__name__}) only when the layer's stepper is second-order; "
                f"{type(stepper).__name__} is first-order."
            )
        if ffn.second_order and stepper.multistep:
            raise ValueError(
                f"a multistep stepper ({type(stepper).__name__}) cannot share its layer with the FFN as a force."
            )
        self.ffn, self.splitting, self.ffn_dt = ffn, splitting, ffn_dt

    def claims_on(self, ffn: bool, maps: bool) -> Claims:
        stepper, scheme = self.stepper.claims(), self.ffn.claims()
        if maps or stepper.order == 0:
            order = 0
        elif not ffn:
            order = stepper.order
        elif self.ffn_dt is not None:
            order = 0  # a fixed-size sub-step: no small-step limit
        else:
            # Strang needs one-step parts: a multistep scheme's history is not carried through the FFN's half steps
            # to second order (checked: leapfrog under Strang converges with order 1)
            limit = 1 if (self.splitting == "lie" or stepper.multistep) else 2
            order = min(limit, stepper.order, scheme.order)
        force = scheme.second_order  # the FFN as a force of a second-order scheme
        return Claims(
            order=order,
            second_order=stepper.second_order,
            symplectic=stepper.symplectic and force and scheme.symplectic,
            reversible=stepper.reversible and force and scheme.reversible and not maps,
            evals_per_step=stepper.evals_per_step,
            fsal=stepper.fsal and not ffn and not maps,
            multistep=stepper.multistep,
            startup_evals=stepper.startup_evals,
        )

    def init(self, field, t0, y0):
        block = self._check(field)
        if self.splitting == "strang" and block.ffn is not None:
            self._unpack(y0)
            return _START  # the stepper is initialised in step, at the state after the first FFN half step
        return self.stepper.init(block.attention, t0, y0)

    def step(self, field, t, y, dt, state):
        block = self._check(field)
        if block.ffn is None:
            y, state = self._attention_step(block, t, y, dt, state)
            return apply_map(block.after_attention, y), state
        h = dt if self.ffn_dt is None else self.ffn_dt
        if self.splitting == "lie":
            y, state = self._attention_step(block, t, y, dt, state)
            y = apply_map(block.after_attention, y)
            return apply_map(block.after_ffn, self._ffn_step(block.ffn, t, y, h)), state
        half = 0.5 * h
        y = self._ffn_step(block.ffn, t, y, half)
        y, state = self._attention_step(block, t, y, dt, state)
        y = apply_map(block.after_attention, y)
        return apply_map(block.after_ffn, self._ffn_step(block.ffn, t + half, y, half)), state

    def _attention_step(self, block: Block, t: Any, y: Y, dt: Any, state: Any) -> tuple[Y, Any]:
        if state is _START:  # the first step after init: the stepper starts here
            state = self.stepper.init(block.attention, t, y)
        return self.stepper.step(block.attention, t, y, dt, state)

    def _ffn_step(self, ffn: Field, t: Any, y: Y, h: Any) -> Y:
        if isinstance(y, PhaseState) and not self.ffn.second_order:
            return _lifted_step(self.ffn, ffn, t, y, h)
        y1, _ = self.ffn.step(ffn, t, y, h, self.ffn.init(ffn, t, y))
        return y1

    def inverse(self, field, t, y1, dt):
        block = self._check(field)
        if not self.reversible or block.maps:
            raise ValueError(f"{self!r} is not reversible: every sub-step must be invertible and no map may follow.")
        if block.ffn is None:
            return self.stepper.inverse(block.attention, t, y1, dt)
        h = dt if self.ffn_dt is None else self.ffn_dt
        if self.splitting == "lie":
            return self.stepper.inverse(block.attention, t, self.ffn.inverse(block.ffn, t, y1, h), dt)
        half = 0.5 * h
        y = self.ffn.inverse(block.ffn, t + half, y1, half)
        return self.ffn.inverse(block.ffn, t, self.stepper.inverse(block.attention, t, y, dt), half)

    def limit_field(self, field):
        block = self._check(field)
        if self.claims(block).order == 0:
            raise self._no_limit()
        if block.ffn is None:
            return self.stepper.limit_field(block.attention)
        substep = self.ffn.limit_field(block.ffn)  # the FFN sub-step's own limit (the FFN itself for Euler, Heun)
        if not self.second_order:
            return limit_with_substep(self.stepper, block.attention, substep)
        attention = self.stepper.limit_field(block.attention)

        def limit(t, y):
            if self.ffn.second_order:  # the FFN as a force: its own second-order limit
                return _sum(attention(t, y), substep(t, y))
            return _sum(attention(t, y), PhaseState(*_field_tangent(substep, t, y.x, y.v)))  # the tangent lift

        return limit

    def extra_repr(self) -> str:
        step = "" if self.ffn_dt is None else f", ffn_dt={self.ffn_dt}"
        return f"splitting={self.splitting}, ffn={type(self.ffn).__name__}{step}"

    def __repr__(self) -> str:
        return f"Split({type(self.stepper).__name__}, ffn={type(self.ffn).__name__}, {self.splitting})"


class Whole(_BlockStepper):
    """``stepper`` on the whole block's field ``F_a + F_f`` (each stage evaluates both); maps, if any, after it."""

    def claims_on(self, ffn: bool, maps: bool) -> Claims:
        stepper = self.stepper.claims()
        return Claims(
            order=0 if maps else stepper.order,
            second_order=stepper.second_order,
            symplectic=False,
            reversible=False,
            evals_per_step=stepper.evals_per_step,
            fsal=stepper.fsal and not ffn and not maps,
            multistep=stepper.multistep,
            startup_evals=stepper.startup_evals,
        )

    def step(self, field, t, y, dt, state):
        block = self._check(field)
        y, state = self.stepper.step(self._summed(block), t, y, dt, state)
        return apply_map(block.after_ffn, apply_map(block.after_attention, y)), state

    def init(self, field, t0, y0):
        return self.stepper.init(self._summed(self._check(field)), t0, y0)

    @staticmethod
    def _summed(block: Block) -> Field:
        return block.attention if block.ffn is None else _Sum(block.attention, block.ffn)

    def limit_field(self, field):
        block = self._check(field)
        if self.claims(block).order == 0:
            raise self._no_limit()
        return self.stepper.limit_field(self._summed(block))

    def __repr__(self) -> str:
        return f"Whole({type(self.stepper).__name__})"
