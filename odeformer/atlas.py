"""The stability atlas of a trained model, and whether the trained model behaves like the ODE its layers discretise.

**Atlas.** For each layer, at the state the layer receives on a batch of data, the leading eigenvalues of the
Jacobian ``J`` of that layer's attention field (the field its scheme steps), found by a Krylov method with
Jacobian-vector products: no dense Jacobian is formed. The Krylov space starts from the state itself (its mean-free
part, and its velocity for a second-order layer), so on a field that is linear in the state the space is invariant
after as many vectors as the state has distinct modes, and everything computed on it is exact. Per layer:

- ``eigenvalues``: the Ritz values of ``J`` of largest modulus (``λ``; the scheme sees ``dt·λ``, and a second-order
  scheme ``x'' = a(x)`` sees ``dt²·λ``);
- ``headroom``: the largest factor by which ``dt`` could grow with every measured ``λ`` whose exact flow does not
  grow (:func:`settled`; ``growing`` counts the others) still inside the scheme's stability region: the one-step map
  of the scheme on ``y' = λ y`` (``x'' = λ x`` for a second-order scheme, at the oscillation ``Re λ``), with the
  layer's own scheme parameters (per channel), has spectral radius at most one (measured by stepping the scheme
  itself; see :func:`radius`);
- ``predicted_contraction``: the ratio of Dirichlet energies across the layer that the scheme gives on the linear
  field ``J`` at the measured spectrum: the scheme steps the projected system ``z' = H z`` (``H = QᵀJQ``), started
  from the state's projection, and the result is lifted back;
- ``measured_contraction``: the same ratio across the trained layer itself (:func:`odeformer.diagnostics.
  dirichlet_energy`, the batch's sum), FFN and norms included.

On a linear field (fixed row-stochastic attention, no FFN) the prediction equals the measurement to rounding; on a
trained layer the difference is what the FFN, the norms and the field's nonlinearity do.

**Refinement** (:func:`refinement`). Each layer's step split into ``k`` steps of ``dt/k`` with that layer's weights
(at each step's own time for a model whose weights are a function of time), or, for ``k = 1/m``, every ``m``-th
layer stepping over ``m dt``: the ODE the network discretises at other resolutions. The relative change of the
logits and of the last hidden state against the finest ``k``, and the observed order of convergence (the slope of
the change against ``k``). A network that is a consistent discretisation changes little and converges at its
scheme's order.
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from solvers import AbstractStepper, PhaseState
from solvers import y_for as solvers_y_for

from .diagnostics import dirichlet_energy

INSIDE = 1e-6
"""A point is inside the stability region when the measured spectral radius is at most ``1 + INSIDE``."""


# -- the layers' inputs -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def observing(backbone: nn.Module, observer: Callable[[int, nn.Module, Any, dict[str, Any]], None]) -> Iterator[None]:
    """Within the block, ``observer(index, layer, y, context)`` sees each layer's input state and context."""
    before = backbone.observer
    backbone.observer = observer
    try:
        yield
    finally:
        backbone.observer = before


def check_resolution(k: Any, depth: int) -> float:
    """``k`` as a resolution of a ``depth``-layer model's steps, or a one-line error: a whole number ``k >= 1``
    (each step taken as ``k`` steps of ``dt / k``), or ``1/m`` (``0.5``, ``0.25``, ...) with ``m`` dividing the depth
    (every ``m``-th layer, stepping over the ``m`` layers' span)."""
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not (math.isfinite(k) and k > 0):
        raise ValueError(f"a resolution is a positive number of steps per layer step, got {k!r}.")
    if k >= 1:
        if k != int(k):
            raise ValueError(f"a resolution k >= 1 is a whole number of steps per layer step, got {k!r}.")
        return int(k)
    m = round(1 / k)
    if abs(1 / m - k) > 1e-12 or depth % m:
        raise ValueError(
            f"a resolution k < 1 coarsens to every m-th layer: k = 1/m with m dividing the depth ({depth}), got {k!r}."
        )
    return 1 / m


@contextlib.contextmanager
def resampled(backbone: nn.Module, k: float) -> Iterator[None]:
    """Within the block, the model takes ``k`` steps per layer step (:func:`check_resolution`): ``k > 1`` refines
    each layer's step into ``k`` steps of ``dt / k`` with its weights; ``k = 1/m`` coarsens to every ``m``-th
    layer's step of ``m dt`` (a model whose weights are a function of time, ``model.knots``, evaluates its fields at
    every step's own time)."""
    k = check_resolution(k, len(backbone.layers))
    before = backbone.resolution
    backbone.resolution = k
    try:
        yield
    finally:
        backbone.resolution = before


class StiffFlow(RuntimeError):
    """The adaptive solver of a model's limit flow ran out of steps."""


@contextlib.contextmanager
def solved(
    backbone: nn.Module, method: str = "dopri5", rtol: float = 1e-5, atol: float = 1e-6, max_steps: int = 2000
) -> Iterator[dict]:
    """Within the block, the backbone runs the ODE its layers discretise instead of stepping them: each layer's
    block stepper's limit field (:meth:`solvers.AbstractStepper.limit_field`, the FFN and a scheme's own limit
    included) on its span of depth-time, integrated by torchdiffeq's adaptive ``method`` to ``rtol``/``atol`` over
    the layers' whole span, on the trained weights (at each evaluation's own time for a model whose weights are a
    function of time, ``model.knots``). Yields ``{"evaluations": n}``, the limit fields' evaluations of the passes
    made within the block. A pass that needs more than ``max_steps`` steps (a stiff field) is a one-line
    :class:`StiffFlow` error."""
    import torchdiffeq

    layers = list(backbone.layers)
    if len({layer.second_order for layer in layers}) > 1:
        raise ValueError(
            "the limit flow of a schedule switching between first- and second-order layers is not one ODE."
        )
    starts = [layer.t0 for layer in layers]
    end = layers[-1].t0 + layers[-1].dt
    counted = {"evaluations": 0}

    def integrate(_, x: Tensor, fields: list) -> Any:
        limits = [layer.block_stepper.limit_field(block) for layer, block in zip(layers, fields)]
        y0 = solvers_y_for(layers[0].block_stepper, x)
        second = isinstance(y0, PhaseState)

        def f(t: Tensor, y: Any) -> Any:
            counted["evaluations"] += 1
            i = max(bisect.bisect_right(starts, float(t)) - 1, 0)
            out = limits[i](t, PhaseState(*y) if second else y)
            return tuple(out) if second else out

        times = torch.tensor([starts[0], end], dtype=x.dtype, device=x.device)
        try:
            found = torchdiffeq.odeint(
                f, tuple(y0) if second else y0, times, method=method, rtol=rtol, atol=atol,
                options={"max_num_steps": max_steps},
            )  # fmt: skip
        except AssertionError as error:  # torchdiffeq's way of saying it ran out of steps
            if "max_num_steps" not in str(error):
                raise
            raise StiffFlow(
                f"{method} needed more than {max_steps} steps at rtol {rtol:g}: the field is stiff"
            ) from None
        return PhaseState(found[0][-1], found[1][-1]) if second else found[-1]

    before = backbone.integrator
    backbone.integrator = integrate
    try:
        yield counted
    finally:
        backbone.integrator = before


def _backbone(model: nn.Module) -> nn.Module:
    backbone = getattr(model, "backbone", model)
    if not getattr(backbone, "layers", None):
        raise ValueError(
            "the atlas reads a discrete backbone's layers; a continuous-depth model has one adaptive block and no "
            "layer steps to analyse."
        )
    return backbone


# -- Krylov ---------------------------------------------------------------------------------------------------------


def _centred(x: Tensor) -> Tensor:
    return x - x.mean(dim=-2, keepdim=True)  # (B, N, D): the mean-free part over the tokens


def krylov(operator: Callable[[Tensor], Tensor], starts: Sequence[Tensor], size: int) -> tuple[Tensor, Tensor]:
    """An orthonormal basis ``Q`` (``n × m``) of the Krylov space of ``operator`` from ``starts``, and ``H = QᵀJQ``.

    The space grows by applying the operator to its newest basis vector (after the start vectors, one by one, with two
    passes of Gram–Schmidt) until it has ``size`` vectors or stops growing (the space is invariant: then everything
    computed on it is exact for a linear operator). Everything is float64."""
    basis: list[Tensor] = []
    images: list[Tensor] = []

    def add(vector: Tensor) -> bool:
        vector = vector.double().reshape(-1)
        scale = vector.norm()
        for _ in range(2):
            for q in basis:
                vector = vector - (q @ vector) * q
        if not float(vector.norm()) > 1e-10 * max(float(scale), 1e-300):
            return False
        basis.append(vector / vector.norm())
        return True

    for start in starts:
        add(start)
    done = 0
    while done < len(basis) and len(basis) < size:
        images.append(operator(basis[done]).double().reshape(-1))
        add(images[-1])
        done += 1
    while done < len(basis):  # the image of every basis vector, for H
        images.append(operator(basis[done]).double().reshape(-1))
        done += 1
    Q = torch.stack(basis, dim=1)  # (n, m)
    return Q, Q.T @ torch.stack(images, dim=1)


def _jvp_operator(field: Callable[[Any, Tensor], Tensor], t: float, x: Tensor) -> Callable[[Tensor], Tensor]:
    """``v ↦ J v`` for the field's Jacobian at ``x``, by forward-mode AD in the model's own precision."""
    x = x.detach()

    def apply(v: Tensor) -> Tensor:
        _, out = torch.func.jvp(lambda z: field(t, z), (x,), (v.reshape(x.shape).to(x.dtype),))
        return out.double()

    return apply


# -- the scalar test problem --------------------------------------------------------------------------------------


def _complex_field(lam: Tensor) -> Callable[[Any, Tensor], Tensor]:
    """``x ↦ λ x`` on a complex state held as ``(2, P, D)`` (real and imaginary parts), ``λ`` of shape ``(P,)``."""
    re, im = lam.real.double()[:, None], lam.imag.double()[:, None]

    def field(t: Any, x: Tensor) -> Tensor:
        return torch.stack((re * x[0] - im * x[1], im * x[0] + re * x[1]))

    return field


def _float64(stepper: AbstractStepper) -> AbstractStepper:
    """``stepper`` in float64 (a copy, when its parameters or buffers are of another precision)."""
    tensors = [*stepper.parameters(), *stepper.buffers()]
    if all(t.dtype == torch.float64 for t in tensors):
        return stepper
    import copy

    return copy.deepcopy(stepper).double()


def _width(stepper: AbstractStepper) -> int:
    return max([p.shape[-1] for p in stepper.parameters() if p.dim() >= 1] + [1])


def radius(stepper: AbstractStepper, dt: float, lam: Tensor) -> Tensor:
    """The spectral radius of ``stepper``'s linear map on ``y' = λ y`` (first order) or ``x'' = λ x`` (second order)
    at step ``dt``, for each ``λ`` (a complex tensor ``(P,)``), the largest over the stepper's channels (its own
    parameters, per channel, included).

    A one-step scheme's map is read from the step itself: one step from each basis state of the real form (``y`` as
    ``(re, im)``, and ``v`` too for a second-order scheme) gives its columns, and the radius is its eigenvalues' largest
    modulus. A multistep scheme's map includes its history, which its ``state`` holds in a form of its own and shows
    through ``history(state)`` / ``with_history(state, tensors)``: its companion map is read the same way."""
    lam = lam.reshape(-1).to(torch.complex128)
    if not lam.numel():
        return torch.zeros(0, dtype=torch.float64)
    stepper = _float64(stepper)
    if stepper.multistep:
        if not (callable(getattr(stepper, "history", None)) and callable(getattr(stepper, "with_history", None))):
            raise ValueError(
                f"{type(stepper).__name__} keeps a history in its state (multistep) and does not expose it: define "
                "history(state) and with_history(state, tensors) (see solvers.analysis) to have its radius read."
            )
        return _companion_radius(stepper, dt, lam)
    width, points = _width(stepper), lam.numel()
    size = 4 if stepper.second_order else 2
    start = _basis(size, points, width)
    field = _complex_field(lam.repeat(size))
    y: Any = PhaseState(start[:2].contiguous(), start[2:].contiguous()) if stepper.second_order else start
    with torch.no_grad():
        y1, _ = stepper.step(field, 0.0, y, dt, stepper.init(field, 0.0, y))
    out = torch.cat((y1.x, y1.v)) if isinstance(y1, PhaseState) else y1  # (size, size * P, D): row i, column k
    values = torch.linalg.eigvals(_as_maps(out, size, points, width)).abs()
    return torch.nan_to_num(values, nan=math.inf).amax(dim=(-1, -2))


def _companion_radius(stepper: AbstractStepper, dt: float, lam: Tensor) -> Tensor:
    """A multistep scheme's radius from its companion map: its state with its history (``history(state)`` and
    ``with_history(state, tensors)``, the protocol :mod:`solvers.analysis` reads) stepped from each basis state."""
    width, points = _width(stepper), lam.numel()
    second = bool(stepper.second_order)
    size_y = 4 if second else 2

    def state_of(start: Tensor, field: Any) -> tuple[Any, Any]:
        y: Any = PhaseState(start[:2].contiguous(), start[2:4].contiguous()) if second else start[:2].contiguous()
        with torch.no_grad():
            y1, state = stepper.step(field, 0.0, y, dt, stepper.init(field, 0.0, y))  # the start-up step, over
        return y1, state

    probe = _complex_field(lam)
    _, state = state_of(torch.zeros(size_y, points, width, dtype=torch.float64), probe)
    size = size_y + sum(t.shape[0] for t in stepper.history(state))
    start = _basis(size, points, width)
    field = _complex_field(lam.repeat(size))
    _, state = state_of(start, field)
    tensors, row = [], size_y
    for t in stepper.history(state):
        tensors.append(start[row : row + t.shape[0]].contiguous())
        row += t.shape[0]
    y: Any = PhaseState(start[:2].contiguous(), start[2:4].contiguous()) if second else start[:2].contiguous()
    with torch.no_grad():
        y1, state1 = stepper.step(field, dt, y, dt, stepper.with_history(state, tuple(tensors)))
    parts = [*((y1.x, y1.v) if second else (y1,)), *stepper.history(state1)]
    out = torch.cat(parts)  # (size, size * P, D)
    values = torch.linalg.eigvals(_as_maps(out, size, points, width)).abs()
    return torch.nan_to_num(values, nan=math.inf).amax(dim=(-1, -2))


def _basis(size: int, points: int, width: int) -> Tensor:
    """``(size, size * P, D)``: copy ``k`` of every point holds the basis vector ``e_k`` of the real form."""
    eye = torch.eye(size, dtype=torch.float64)
    return eye[:, None, :, None].expand(size, points, size, width).permute(2, 0, 1, 3).reshape(size, -1, width)


def _as_maps(out: Tensor, size: int, points: int, width: int) -> Tensor:
    """The images of :func:`_basis`'s copies as matrices ``(P, D, size, size)`` (column ``k``: the image of ``e_k``)."""
    return out.reshape(size, size, points, width).permute(2, 3, 0, 1)


def inside(stepper: AbstractStepper, dt: float, lam: Tensor) -> Tensor:
    """Whether each ``λ`` is inside the scheme's stability region at step ``dt``: its map's spectral radius is at
    most 1 (to :data:`INSIDE`)."""
    return radius(_float64(stepper), dt, lam) <= 1 + INSIDE


def settled(lam: Tensor, second_order: bool) -> Tensor:
    """The eigenvalues whose exact flow does not grow, where a step's stability is the question: ``Re λ < 0`` for
    ``y' = λ y``; for ``x'' = λ x`` the oscillation ``Re λ < 0`` (read on the real axis: the frequency
    ``ω² = −Re λ``; a non-real ``λ`` adds a growth of its own, which no step size removes)."""
    lam = lam.reshape(-1).to(torch.complex128)
    keep = lam[lam.real < -1e-9 * max(float(lam.abs().max()), 1e-300)] if lam.numel() else lam
    return torch.complex(keep.real, torch.zeros_like(keep.real)) if second_order else keep


def headroom(stepper: AbstractStepper, dt: float, lam: Tensor, upper: float = 64.0) -> float:
    """The largest factor ``c`` (at most ``upper``) such that every ``λ`` stays inside the region at step ``c·dt``
    (:func:`inside`): a scan over ``c`` (doubling from 1/64), then bisection at the first step out; ``upper`` when it
    never leaves (or there is nothing to bound)."""
    if not lam.numel():
        return upper

    def fits(c: float) -> bool:
        return bool(inside(stepper, c * dt, lam).all())

    low, high = 0.0, 1.0 / 64
    while fits(high):
        low, high = high, 2 * high
        if high > upper:
            return upper
    for _ in range(30):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


# -- the atlas ------------------------------------------------------------------------------------------------------


def _predicted(layer: Any, y: Any, operator: Callable[[Tensor], Tensor]) -> Tensor:
    """The layer's scheme stepping the field linearised at the layer's input, ``z' = J z`` (``z'' = J z``), from the
    state's mean-free part: the step ``R(dt J)`` the measured spectrum gives, on the whole state."""

    def field(t: Any, z: Tensor) -> Tensor:
        return operator(z).reshape(z.shape).to(z.dtype)

    x = _centred(y.x if isinstance(y, PhaseState) else y)
    z: Any = PhaseState(x, _centred(y.v)) if isinstance(y, PhaseState) else x
    stepper = layer.stepper
    with torch.no_grad():
        z1, _ = stepper.step(field, layer.t0, z, layer.dt, stepper.init(field, layer.t0, z))
    return z1.x if isinstance(z1, PhaseState) else z1


def atlas(model: nn.Module, inputs: Sequence[Any], count: int = 16, size: int = 48) -> list[dict[str, Any]]:
    """The stability atlas of ``model`` on ``inputs`` (one batch), one entry per layer (see the module docstring):
    ``layer``, ``scheme``, ``second_order``, ``dt``, ``eigenvalues`` (at most ``count`` pairs ``(re, im)``: ``J``'s
    Ritz values of largest modulus), ``headroom``, ``predicted_contraction``, ``measured_contraction`` and
    ``krylov`` (the dimension of the space, at most ``size``).

    The headroom is read at the eigenvalues whose exact flow does not grow (:func:`settled`); ``growing`` counts the
    others (a zero eigenvalue, such as the mean a laplacian field leaves alone, sets no bound either)."""
    backbone = _backbone(model)
    model = model.eval()
    seen: list[tuple[Any, Any, dict[str, Any]]] = []
    record: list = []
    with observing(backbone, lambda i, layer, y, context: seen.append((layer, y, context))), torch.no_grad():
        model(*inputs, record=record)
    out = []
    for index, ((layer, y, context), y1) in enumerate(zip(seen, record[1:])):
        x = y.x if isinstance(y, PhaseState) else y
        starts = [_centred(x)] + ([_centred(y.v)] if isinstance(y, PhaseState) else [])
        operator = _jvp_operator(layer.block(context).attention, layer.t0, x)
        with torch.no_grad():  # forward-mode AD needs no graph of the parameters
            _, H = krylov(operator, starts, size)
        ritz = torch.linalg.eigvals(H)
        leading = ritz[torch.argsort(ritz.abs(), descending=True)][:count]
        energy = float(dirichlet_energy(x.double()).sum())
        predicted = _predicted(layer, y, operator)
        x1 = y1.x if isinstance(y1, PhaseState) else y1
        out.append(
            {
                "layer": index + 1,
                "scheme": type(layer.stepper).__name__,
                "second_order": bool(layer.second_order),
                "dt": layer.dt,
                "eigenvalues": [[float(v.real), float(v.imag)] for v in leading],
                "headroom": headroom(layer.stepper, layer.dt, settled(leading, bool(layer.second_order))),
                "growing": int(leading.numel() - settled(leading, False).numel()),
                "predicted_contraction": float(dirichlet_energy(predicted).sum()) / energy,
                "measured_contraction": float(dirichlet_energy(x1.double()).sum()) / energy,
                "krylov": int(H.shape[0]),
            }
        )
    return out


# -- refinement -----------------------------------------------------------------------------------------------------


def _features(model: nn.Module, inputs: Sequence[Any]) -> tuple[Tensor, Tensor]:
    record: list = []
    logits = model(*inputs, record=record)
    last = record[-1]
    return logits.double(), (last.x if isinstance(last, PhaseState) else last).double()


def refinement(
    model: nn.Module,
    inputs: Sequence[Any],
    parts: Sequence[float] = (2, 4, 8),
    metric: Callable[[Tensor], float] | None = None,
    limit: str | None = None,
    limit_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The model at ``k`` steps per layer step (``k = 1`` and each of ``parts``; :func:`resampled`): per ``k``, the
    relative change of the logits and of the last hidden state against the finest ``k``, and ``metric`` of the logits if
    given; and ``observed_order``: the least-squares slope of ``log ‖L_k − L_k'‖`` against ``log(1/k)`` over consecutive
    ``k < k'`` (Richardson's estimate: with ``k`` doubling, each difference is ``2^p`` times the next for a method of
    order ``p``, with no bias from a reference), or ``None`` with fewer than two differences or a zero one;
    ``local_orders``: the same read from each difference to the next alone, ``log(d_i / d_{i+1}) / log(k_{i+1} / k_i)``
    (``None`` where a difference is zero), whose last entries are the asymptotic rate the fit over every ``k`` mixes
    with the coarse ones' (exact where the ``k`` double). ``limit`` (a torchdiffeq method, e.g. ``"dopri5"``) also
    solves the ODE the layers discretise (:func:`solved`): each row's ``limit_change`` is then its logits' distance from
    that solution, and ``limit`` holds the solution's ``metric``, its distance from the finest ``k`` and its field
    evaluations (``limit_options``: :func:`solved`'s tolerances and step bound)."""
    backbone = _backbone(model)
    ks = sorted({1, *(check_resolution(k, len(backbone.layers)) for k in parts)})
    if len(ks) < 2:
        raise ValueError("refinement needs at least one k other than 1 to compare with.")
    model = model.eval()
    found = {}
    solution, stiff = None, None
    with torch.no_grad():
        for k in ks:
            with resampled(backbone, k):
                found[k] = _features(model, inputs)
        if limit is not None:
            try:
                with solved(backbone, method=limit, **(limit_options or {})) as counted:
                    solution = _features(model, inputs)[0]
            except StiffFlow as error:
                stiff = str(error)
    fine_logits, fine_hidden = found[ks[-1]]
    rows = []
    for k in ks:
        logits, hidden = found[k]
        row = {
            "k": k,
            "logit_change": float((logits - fine_logits).norm() / fine_logits.norm()),
            "hidden_change": float((hidden - fine_hidden).norm() / fine_hidden.norm()),
        }
        if metric is not None:
            row["metric"] = float(metric(logits))
        if solution is not None:
            row["limit_change"] = float((logits - solution).norm() / solution.norm())
        rows.append(row)
    steps = [(a, float((found[a][0] - found[b][0]).norm() / fine_logits.norm())) for a, b in zip(ks, ks[1:])]
    order = None
    if len(steps) >= 2 and all(change > 0 for _, change in steps):
        xs = [math.log(1 / k) for k, _ in steps]
        ys = [math.log(change) for _, change in steps]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        order = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
    local = [math.log(d / e) / math.log(b / a) if d > 0 and e > 0 else None for (a, d), (b, e) in zip(steps, steps[1:])]
    out: dict[str, Any] = {"refinement": rows, "observed_order": order, "local_orders": local}
    if stiff is not None:
        out["limit"] = {"method": limit, "unsolved": stiff}
    if solution is not None:
        out["limit"] = {
            "method": limit,
            "evaluations": counted["evaluations"],
            "logit_change": float((fine_logits - solution).norm() / solution.norm()),
            **({"metric": float(metric(solution))} if metric is not None else {}),
        }
    return out


def verdict(found: dict[str, Any], order: int, metric: str = "metric", tolerance: float = 0.01) -> str:
    """What a refinement says, in words: whether the trained model behaves as an ODE — its outputs converge as its
    steps shrink, at least at ``min(order, 2) - 0.5`` (the bound a kink in piecewise-linear weights or float32
    rounding leaves below its layers' ``order``), and its ``metric`` at its own resolution is within ``tolerance`` of
    the finest one's — with its observed order and how far the metric moves across the resolutions measured."""
    observed = found.get("observed_order")
    rows = found["refinement"]
    own = next((row.get(metric) for row in rows if row["k"] == 1), None)
    finest = rows[-1].get(metric)
    values = [row[metric] for row in rows if row.get(metric) is not None]
    moves = ""
    if values:
        spread, first, last = max(values) - min(values), rows[0]["k"], rows[-1]["k"]
        moves = f" Its {metric} ranges over {spread:.3f} across k = {first:g} to {last:g}"
        if own is not None and finest is not None:
            moves += f" ({own:.4f} as trained, {finest:.4f} at k = {rows[-1]['k']:g})"
        moves += "."
    if order < 1:
        return f"Its layers have no small-step limit (order 0): it discretises no ODE.{moves}"
    if observed is None:
        return "Its outputs do not change with k (or a difference is zero): no order can be read."
    converges = observed >= min(order, 2) - 0.5
    holds = own is None or finest is None or abs(own - finest) <= tolerance
    said = f"refined, its logits converge at observed order {observed:.2f} (its layers' order is {order})"
    if converges and holds:
        return f"It behaves as an ODE: {said}, and its {metric} holds within {tolerance:g} of its finest.{moves}"
    if converges:
        return (
            f"It converges but is not yet its ODE at its own step: {said}, but its {metric} moves by more than "
            f"{tolerance:g} on the way (its trained fields are too stiff for its step).{moves}"
        )
    return (
        f"It does not behave as an ODE: {said}, below what its scheme gives (it depends on its discretisation, or "
        f"its fields are too stiff for its step).{moves}"
    )
