"""The layer check: a block stepper (attention and FFN as one step) against its block's ODE, and its protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import _copy, placed
from ._drawn import check_drawn
from .order import _assert_order, check_no_limit, measure_order, placed_problem
from .problems import Problem, block_problem, generator, stepper_width
from .protocol import _protocol_run
from .references import _flat


@dataclass(frozen=True)
class BlockCase:
    """A drawn block problem for a layer's protocol: its weights' seed, batch, tokens, and the steps."""

    seed: int
    batch: int
    tokens: int
    dt: float
    steps: int

    def __str__(self) -> str:
        return (
            f"block seed {self.seed}, batch {self.batch}, {self.tokens} token(s), {self.steps} step(s) of {self.dt:.4g}"
        )


def check_layer_protocol(stepper: AbstractStepper, examples: int = th.EXAMPLES, width: int | None = None) -> None:
    """Assert a block stepper keeps the step protocol on ``examples`` drawn blocks (:func:`block_problem`: attention
    over 1 to 4 tokens and a tanh FFN, batches of 2 or 3, up to 8 steps of a signed ``dt``): every step returns
    ``y``'s form and writes into nothing it was given, a step repeats exactly and in the other mode, and each sample
    is stepped independently of the others (a step that flattens the batch into rows before calling attention mixes
    samples). ``width``: the states' width (default: the stepper's per-channel width, else 2)."""
    _drawn_layer_protocol(stepper, width or stepper_width(stepper) or 2, examples)


def _drawn_layer_protocol(stepper: AbstractStepper, width: int, examples: int) -> None:
    name, pristine = repr(stepper), _copy(stepper)
    cases = st.builds(
        BlockCase,
        seed=st.integers(0, 2**31 - 1),
        batch=st.integers(2, 3),
        tokens=st.integers(1, 4),
        dt=st.builds(lambda e, sign: sign * 10.0**e, st.floats(-2.0, 0.0), st.sampled_from([1.0, -1.0])),
        steps=st.integers(1, 8),
    )

    def claim(case: BlockCase) -> None:
        layer = _copy(pristine)
        p = block_problem(case.seed, layer.second_order, case.tokens, width, batch=case.batch)
        t0 = placed(layer, 0.0, [case.dt] * case.steps)  # inside the layer's time_domain, where it states one
        if t0 is not None:
            _protocol_run(name, [layer], p, t0, [case.dt] * case.steps, case.seed + 1)

    check_drawn(cases, claim, examples)


def check_layer(
    stepper: AbstractStepper, problem: Problem | None = None, examples: int = th.EXAMPLES
) -> dict[str, Any]:
    """Assert a block stepper (:class:`~solvers.Split`, :class:`~solvers.Whole` or one of your own, stepping on a
    :class:`~solvers.Block`) converges to its block's ODE with the order it declares for that block.

    The declared order is ``stepper.claims(block).order`` (a split layer's order depends on the block: with no FFN it is
    the stepper's, with maps after the sublayers 0). It is
    measured as :func:`check_order` measures a scheme, against ``stepper.limit_field(block)``, on ``problem`` (default:
    :func:`block_problem` of the stepper's kind and per-channel width, weight-tied: the same block every step). Unless
    ``problem`` is given, the layer's protocol is checked too on ``examples`` drawn blocks (seed, batches of 2 or 3, 1
    to 4 tokens, signed ``dt``, up to 8 steps): its steps write into nothing they were given, return ``y``'s form, and
    step each sample independently (a step that flattens the batch into rows before calling attention mixes samples).
    Order 0 means no small-step limit; then :func:`check_no_limit` runs instead (``limit_field`` raises ``ValueError``,
    the step does not shrink with ``dt``). Returns ``{"declared": order, "slope": slope}`` (``slope`` None for order 0,
    with the reason).
    """
    drawn = problem is None
    width = stepper_width(stepper) or 2
    problem = placed_problem(stepper, problem or block_problem(second_order=stepper.second_order, dim=width))
    block = problem.field
    declared = stepper.claims(block).order
    if drawn and examples > 0:
        _drawn_layer_protocol(stepper, width, examples)
    claimed = _check_layer_claims(stepper, problem)
    if declared == 0:
        return {"declared": 0, "slope": None, "reason": check_no_limit(stepper, problem), **claimed}
    m = measure_order(stepper, problem)
    _assert_order(repr(stepper), declared, m, what="layer ")
    return {"declared": declared, "slope": m.slope, "measurement": m, **claimed}


class _Counted:
    """A field that counts its calls."""

    def __init__(self, field: Any) -> None:
        self.field, self.calls = field, 0

    def __call__(self, t: Any, x: Any) -> Any:
        self.calls += 1
        return self.field(t, x)


def _check_layer_claims(stepper: AbstractStepper, problem: Problem) -> dict[str, Any]:
    """The claims besides the order of a block stepper on ``problem``'s block, at ``t = 0.3`` (or the nearest start
    inside its ``time_domain``), ``dt = 0.1``:
    ``evals_per_step`` attention evaluations a step from a fresh ``init`` (one fewer on a repeated block if ``fsal``,
    over ``EVAL_STEPS`` tied steps); if ``reversible``, ``inverse`` runs and undoes a step (``REVERSIBLE_RTOL``
    relative to the states' size); unless ``multistep``, a step from the carried state equals one from a fresh
    ``init`` (``ONE_STEP_RTOL``); if ``symplectic``, a step is symplectic on a block whose sublayers are forces of a
    potential (:func:`_check_layer_symplectic`)."""
    name, claims, block = repr(stepper), stepper.claims(problem.field), problem.field
    layer, t, dt = _copy(stepper), _placed(stepper, 0.3, [0.1] * max(th.EVAL_STEPS, 4)), 0.1
    y0 = problem.initial(layer)
    report: dict[str, Any] = {}
    with torch.no_grad():
        counted = _Counted(block.attention)
        fresh = block._replace(attention=counted)
        y1, _ = layer.step(fresh, t, y0, dt, layer.init(fresh, t, y0))
        if not claims.multistep and counted.calls != claims.evals_per_step:
            raise AssertionError(
                f"{name} declares {claims.evals_per_step} attention evaluation(s) per step on {problem.name} but one "
                f"step from a fresh init at t = {t}, dt = {dt} made {counted.calls}."
            )
        if not claims.multistep and not layer.startup_evals:
            counted.calls = 0
            y, state, time = y0, layer.init(fresh, t, y0), t
            for _ in range(th.EVAL_STEPS):
                y, state = layer.step(fresh, time, y, dt, state)
                time = time + dt
            per = claims.evals_per_step
            expected = per + (th.EVAL_STEPS - 1) * (per - 1) if claims.fsal else th.EVAL_STEPS * per
            if counted.calls != expected:
                reuse = " with first-same-as-last reuse" if claims.fsal else ""
                raise AssertionError(
                    f"{name} declares {per} attention evaluation(s) per step{reuse} "
                    f"on {problem.name}, so {expected} over {th.EVAL_STEPS} steps on one block, but it made "
                    f"{counted.calls}."
                )
        report["evaluations"] = claims.evals_per_step
        size = max(float(_flat(y0).abs().max()), float(_flat(y1).abs().max()))
        if claims.reversible:
            try:
                back = layer.inverse(block, t, y1, dt)
            except Exception as error:
                raise AssertionError(
                    f"{name} declares reversible on {problem.name} but its inverse raises "
                    f"{type(error).__name__}: {error}"
                ) from None
            defect = float((_flat(back) - _flat(y0)).abs().max()) / size
            if not defect <= th.REVERSIBLE_RTOL:
                raise AssertionError(
                    f"{name} declares reversible on {problem.name} but inverse(step(y)) misses y by {defect:.2e} "
                    f"(relative; REVERSIBLE_RTOL is {th.REVERSIBLE_RTOL:g}) at t = {t}, dt = {dt}."
                )
            report["reversible"] = defect
        if not claims.multistep:
            y, state, time = y0, layer.init(block, t, y0), t
            for _ in range(3):
                y, state = layer.step(block, time, y, dt, state)
                time = time + dt
            carried, _ = layer.step(block, time, y, dt, state)
            alone, _ = _copy(stepper).step(block, time, y, dt, layer.init(block, time, y))
            defect = float((_flat(carried) - _flat(alone)).abs().max()) / size
            if not defect <= th.ONE_STEP_RTOL:
                raise AssertionError(
                    f"{name} declares one-step on {problem.name} but its fourth step from the carried state differs "
                    f"from one from a fresh init by {defect:.2e} (relative; ONE_STEP_RTOL is {th.ONE_STEP_RTOL:g})."
                )
            report["one_step"] = defect
    if claims.symplectic:
        report["symplectic"] = _check_layer_symplectic(stepper, problem)
    return report


def _placed(stepper: AbstractStepper, t: float, dts: list[float]) -> float:
    """``t``, or the nearest start inside the layer's ``time_domain`` for steps ``dts``; an ``AssertionError`` where
    none fits."""
    start = placed(stepper, t, dts)
    if start is None:
        raise AssertionError(
            f"{stepper!r}'s time_domain {stepper.time_domain!r} holds no {len(dts)} steps of {dts[0]:g}: the kit "
            "cannot check its layer claims."
        )
    return start


def _hamiltonian_block(width: int, tokens: int, seed: int = 11):
    """A block whose sublayers are both forces of a potential (so a symplectic layer's step is symplectic on it):
    attention ``-∇ (½ Σ x K x + ¼ Σ x⁴)`` coupling the tokens' channels, FFN ``-∇ Σ log cosh(x W) / |W|``, weights
    from ``seed``."""
    from .._splitting import Block

    g = generator(seed)
    n = tokens * width
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    K = (A @ A.T) / n + torch.eye(n, dtype=torch.float64)
    W = torch.randn(width, width, generator=g, dtype=torch.float64) / width**0.5

    def attention(t, x):
        flat = x.reshape(*x.shape[:-2], n)
        return -(flat @ K + flat**3).reshape(x.shape)

    def ffn(t, x):
        return -torch.tanh(x @ W) @ W.T

    return Block(attention, ffn)


def _check_layer_symplectic(stepper: AbstractStepper, problem: Problem) -> float:
    """One step's Jacobian ``M`` on a Hamiltonian block (:func:`_hamiltonian_block`, the block's own shape, one
    sample) has ``Mᵀ J M = J`` to ``SYMPLECTIC_RTOL |M|²``, at ``t = 0.3`` (inside the layer's ``time_domain``),
    ``dt`` 0.1 and 0.5; returns the largest
    defect over ``|M|²``."""
    name = repr(stepper)
    shape = problem.x0.shape[1:]
    block = _hamiltonian_block(shape[-1], shape[0] if len(shape) > 1 else 1)
    if problem.field.ffn is None:
        block = block._replace(ffn=None)
    g = generator(5)
    x0 = torch.randn(1, *shape, generator=g, dtype=torch.float64)
    v0 = torch.randn(1, *shape, generator=g, dtype=torch.float64)
    n = x0.numel()
    worst = 0.0
    t = _placed(stepper, 0.3, [0.5])
    for dt in (0.1, 0.5):
        layer = _copy(stepper)

        def step(z, dt=dt, layer=layer):
            y = PhaseState(z[:n].reshape(x0.shape), z[n:].reshape(v0.shape))
            y1, _ = layer.step(block, t, y, dt, layer.init(block, t, y))
            return torch.cat([y1.x.reshape(-1), y1.v.reshape(-1)])

        M = torch.autograd.functional.jacobian(step, torch.cat([x0.reshape(-1), v0.reshape(-1)]))
        J = torch.zeros(2 * n, 2 * n, dtype=torch.float64)
        J[:n, n:], J[n:, :n] = torch.eye(n, dtype=torch.float64), -torch.eye(n, dtype=torch.float64)
        size = max(1.0, float(torch.linalg.matrix_norm(M, ord=2)))
        defect = float((M.T @ J @ M - J).abs().max()) / size**2
        worst = max(worst, defect)
        if not defect <= th.SYMPLECTIC_RTOL:
            raise AssertionError(
                f"{name} declares symplectic on {problem.name} but one step of size {dt:g} on a block whose "
                f"sublayers are forces of a potential has Jacobian M (|M| = {size:.3g}) with max|MᵀJM - J| = "
                f"{defect * size**2:.2e}; rounding allows {th.SYMPLECTIC_RTOL:.1e} |M|² (SYMPLECTIC_RTOL)."
            )
    return worst
