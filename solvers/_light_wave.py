"""Light Wave, read as heavy-ball momentum: ``x_{n+1} = x_n + dt f(t_n, x_n) + lam ⊙ (x_n - x_{n-1})``.

The start is ``x_{-1} = x_0``.

The Wavy Transformer paper gives no equation for Light Wave; this is the project's reading: a damped wave
whose only extra memory is the previous state, kept in ``state``. ``lam = sigmoid(theta)`` lies in (0, 1): a fixed
scalar by default, learnable per channel when given ``dim``; it starts at ``theta0 = -2`` (``lam ≈ 0.12``: a
start of 0.5 never learned in the project's first graph runs, 0.12 did). ``theta0 = -inf`` gives
``lam = 0``, exactly ``euler``.

With ``lam`` fixed it converges with order 1 to ``dx/dt = f / (1 - lam)``: momentum lengthens the effective step to
``dt / (1 - lam)``; the start ``x_{-1} = x_0`` adds a transient that decays like ``lam**n``. One evaluation per step;
neither symplectic nor reversible. Reference: Polyak, USSR Comp. Math. Math. Phys. 4(5) (1964).

Its history is the previous position, so a sub-step taken between two of its steps (a split layer's FFN) is part of
the next ``x_n - x_{n-1}`` and momentum lengthens it too: the layer converges to ``x' = (f + g) / (1 - lam)`` for a
sub-step on ``g`` (:meth:`LightWave.limit_with_substep`), not to ``f / (1 - lam) + g``.
"""

from typing import ClassVar

import torch
from torch import Tensor

from ._base import AbstractStepper, axpy, register, sigmoid_gate
from ._registry import register_stepper


@register_stepper("light_wave", update="heavy ball `x + dt f(x) + λ(x_n − x_{n−1})`, `λ = sigmoid(θ)`")
class LightWave(AbstractStepper):
    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    multistep: ClassVar[bool] = True

    def __init__(self, dim: int | None = None, theta0: float = -2.0):
        super().__init__()
        register(self, "theta", sigmoid_gate(dim, theta0))

    def lam(self) -> Tensor:
        """The momentum ``sigmoid(theta)`` (a scalar, or one value per channel)."""
        return torch.sigmoid(self.theta)

    def init(self, field, t0, y0):
        return self._unpack(y0)  # x_{-1} = x_0: the first step has no momentum

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        previous = x if state is None else state
        return torch.addcmul(axpy(x, dt, field(t, x)), self.lam().to(x.dtype), x - previous), x

    def history(self, state):
        """The history the next step reads: the previous position (``solvers.analysis``'s protocol)."""
        return (state,)

    def with_history(self, state, history):
        """The running state with the previous position replaced."""
        (previous,) = history
        return previous

    def limit_field(self, field):
        lam = self.lam()
        return lambda t, x: field(t, x) / (1 - lam.to(x.dtype))

    def limit_with_substep(self, field, substep):
        """The limit with a sub-step on ``substep`` between every two steps: the history ``x_n - x_{n-1}`` records the
        sub-step's displacement, so momentum acts on the summed field."""
        return self.limit_field(lambda t, x: field(t, x) + substep(t, x))
