"""Continuous depth: one weight-tied block integrated over depth-time ``[0, T]`` by torchdiffeq or torchode.

The discrete solvers take one step per layer; here a single block's field is handed to an adaptive ODE solver, which
chooses its own steps. The field is the block's (attention ``F_a`` plus FFN ``F_f``, both in residual form by default):

- first order (``equation="diffusion"``): ``x' = F_a(x) + F_f(x)``;
- second order (``equation="wave"``): the continuous Full Wave, ``x' = v + F_f(x)``, ``v' = F_a(x) + J_{F_f}(x) v``
  with ``F_a`` in laplacian form (the limit of the full_wave solver as ``dt -> 0``; the velocity carried through
  LayerNorm and the MLP by the chain rule), flattened to one first-order system ``[x, v]`` with ``v(0) = 0``.

With ``time_embedding=True`` the block sees ``x + e(t)``, ``e`` a small learned embedding of the depth-time, so the
weight-tied field can still change with depth.

Libraries and methods: torchdiffeq ``dopri5``, ``bosh3`` (adaptive) and ``rk4`` (fixed grid, Kutta's 3/8 rule, step
``T / steps``), with ``adjoint=True`` for ``odeint_adjoint`` (memory independent of the number of steps); torchode
``dopri5`` and ``tsit5`` with per-sample step-size control (the state is flattened to ``(B, N·D)``, so every sample
gets its own steps). Only public APIs of both are used. After every forward :meth:`ContinuousBackbone.solver_stats`
gives the number of field evaluations and of accepted and rejected steps; the training loop logs them as ``nfe``,
``steps_accepted``, ``steps_rejected``.

Padding: the adaptive solvers' error norm (the RMS over the state of the local error over its tolerance) counts only
the tokens some query may attend to, read from the ``attn_mask`` the model passes (a key-padding mask: the real
tokens). Without that, a sentence's steps, and so its features, would depend on how much padding its batch has.
With torchode's per-sample control a sequence's features do not depend on its padding at all; torchdiffeq shares
one step size over the batch, so there only the padding's own share is removed.

``depth`` keeps its meaning for diagnostics: :meth:`ContinuousBackbone.forward` can record the state at ``depth``
evenly spaced times ``t_k = k T / depth``. The adaptive solvers interpolate there with their own dense output; the
fixed grid, whose points need not fall on the ``t_k``, by cubic Hermite interpolation between its points (error of
the order of the method's, ``O(h⁴)``; linear interpolation had been ``O(h²)``, 1e-3 off at the default 8 steps). The
final state is a grid point either way, so recording does not change the output.

Text generation (:mod:`odeformer.generate`): the fixed grid evaluates the field in the same order for any tokens, so
a causal model on it steps new positions with a key/value cache (one slot per evaluation); an adaptive solver's steps
depend on every token's error, so generation recomputes the sequence for each token there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from solvers import STEPPERS, PhaseState

LIBRARIES = {"torchdiffeq": ("dopri5", "bosh3", "rk4"), "torchode": ("dopri5", "tsit5")}
EQUATIONS = ("diffusion", "wave")


@dataclass(frozen=True)
class ContinuousSolver:
    """How a continuous-depth model integrates its block (the ``solver=`` value for adaptive solvers)."""

    name: str = "dopri5"
    library: str = "torchdiffeq"
    method: str = "dopri5"
    rtol: float = 1e-3
    atol: float = 1e-4
    T: float = 1.0
    adjoint: bool = False
    equation: str = "diffusion"  # the block's ODE: diffusion x' = F_a + F_f | wave (the continuous Full Wave)
    time_embedding: bool = False
    steps: int = 8  # fixed-grid methods only: steps over [0, T]
    max_steps: int = 1000  # adaptive: give up (an error) after this many steps

    def __post_init__(self) -> None:
        if self.library not in LIBRARIES:
            raise ValueError(f"library must be one of {', '.join(LIBRARIES)}; got {self.library!r}.")
        if self.method not in LIBRARIES[self.library]:
            raise ValueError(
                f"method {self.method!r} is not available with {self.library}; choose one of "
                f"{', '.join(LIBRARIES[self.library])}."
            )
        for name in ("rtol", "atol", "T"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}.")
        if self.equation not in EQUATIONS:
            raise ValueError(f"equation must be one of {', '.join(EQUATIONS)}; got {self.equation!r}.")
        if self.adjoint and self.library != "torchdiffeq":
            raise ValueError("adjoint=True is available with library=torchdiffeq (odeint_adjoint).")
        if self.steps < 1 or self.max_steps < 1:
            raise ValueError("steps and max_steps must be at least 1.")

    @property
    def form(self) -> str:
        """Attention form of the block: the wave's force is laplacian, the diffusion field residual."""
        return "laplacian" if self.equation == "wave" else "residual"


CONTINUOUS: dict[str, dict[str, Any]] = {
    "dopri5": {"method": "dopri5"},  # Dormand–Prince 5(4), adaptive: x' = Attn(LN x) + MLP(LN x)
    "bosh3": {"method": "bosh3"},  # Bogacki–Shampine 3(2), adaptive, same field
    "rk4_grid": {"method": "rk4"},  # torchdiffeq's fixed-grid rk4 (Kutta's 3/8 rule), `steps` over [0, T]
    "dopri5_adjoint": {"method": "dopri5", "adjoint": True},  # odeint_adjoint: memory independent of the steps
    "dopri5_wave": {"method": "dopri5", "equation": "wave"},  # continuous Full Wave: x' = v + F_f, v' = F_a + J v
    "tsit5": {"library": "torchode", "method": "tsit5"},  # Tsitouras 5(4), per-sample step-size control
    "dopri5_torchode": {"library": "torchode", "method": "dopri5"},  # Dormand–Prince 5(4), per-sample control
}
"""The named continuous-depth solvers (the ``solver`` config group's continuous options): settings over the
:class:`ContinuousSolver` defaults. Their names are reserved in :data:`solvers.STEPPERS`, the table of every other
solver's name, so that a name means one thing."""
STEPPERS.reserve(CONTINUOUS, "a continuous-depth solver")

METHODS = {
    "dopri5": "Dormand–Prince 5(4)",
    "bosh3": "Bogacki–Shampine 3(2)",
    "tsit5": "Tsitouras 5(4)",
    "rk4": "fixed-grid `rk4` (Kutta's 3/8 rule = `solvers.RK4ThreeEighths`)",
}
"""What each method of :data:`LIBRARIES` is, in Markdown (the table in ``docs/models.md``); ``rk4`` is the one fixed
grid."""


def continuous_table() -> str:
    """The table of continuous-depth solvers in ``docs/models.md``, generated from :data:`CONTINUOUS`: each name's
    library, method and what its settings make of it."""
    rows = ["| solver config | library | method | notes |", "|---|---|---|---|"]
    for name, settings in CONTINUOUS.items():
        p = ContinuousSolver(name=name, **settings)
        notes = ["`steps` over `[0, T]`" if p.method == "rk4" else "adaptive; `rtol`, `atol`, `T`"]
        if p.library == "torchode":
            notes.append("per-sample step-size control")
        if p.adjoint:
            notes.append("`odeint_adjoint`: memory independent of the number of steps")
        if p.equation == "wave":
            notes.append("on the continuous Full Wave `x' = v + F_f(x)`, `v' = F_a(x) + J_{F_f}(x) v`")
        rows.append(f"| `{name}` | {p.library} | {METHODS[p.method]} | {'; '.join(notes)} |")
    return "\n".join(rows)


def continuous(name: str = "dopri5", **options: Any) -> ContinuousSolver:
    """A :class:`ContinuousSolver` (what a continuous solver config builds); bad options are a one-line error."""
    if "dynamics" in options:  # the equation's earlier name, in saved configs and older code
        warnings.warn("continuous(dynamics=...) is now continuous(equation=...)", DeprecationWarning, 2)
        options["equation"] = options.pop("dynamics")
    try:
        return ContinuousSolver(name=name, **options)
    except TypeError as error:
        raise ValueError(f"bad continuous solver option: {error}") from None


class TimeEmbedding(nn.Module):
    """``e(t)``: sinusoidal features of the depth-time through a linear map, zero at initialisation."""

    def __init__(self, dim: int, features: int = 16):
        super().__init__()
        self.register_buffer("frequencies", torch.exp(torch.linspace(0, math.log(100.0), features // 2)))
        self.linear = nn.Linear(features, dim)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, t: Tensor) -> Tensor:
        angles = t.reshape(-1, 1).to(self.frequencies.dtype) * self.frequencies  # (B or 1, F/2)
        return self.linear(torch.cat([angles.sin(), angles.cos()], dim=-1))


class _Field(nn.Module):
    """The block as ``func(t, y)`` on a flat state ``(B, F)``: ``F = N·D`` (diffusion) or ``2·N·D`` (wave).

    Counts its evaluations, and the accepted and rejected steps through torchdiffeq's step callbacks.
    """

    def __init__(self, attention: nn.Module, ffn: nn.Module | None, embedding: nn.Module | None, wave: bool):
        super().__init__()
        self.attention, self.ffn, self.embedding, self.wave = attention, ffn, embedding, wave
        self.shape: tuple[int, ...] = ()
        self.context: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        self.nfe, self.accepted, self.rejected = 0, 0, 0

    def callback_accept_step(self, t0, y0, dt) -> None:  # torchdiffeq's public step callbacks
        self.accepted += 1

    def callback_reject_step(self, t0, y0, dt) -> None:
        self.rejected += 1

    def _shift(self, t: Tensor, x: Tensor) -> Tensor:
        if self.embedding is None:
            return x
        e = self.embedding(t)  # (1 or B, D)
        return x + e.view(e.shape[0], 1, -1)

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        self.nfe += 1
        B, (N, D) = y.shape[0], self.shape
        if not self.wave:
            x = self._shift(t, y.view(B, N, D))
            out = self.attention(t, x, **self.context)
            if self.ffn is not None:
                out = out + self.ffn(t, x)
            return out.reshape(B, -1)
        x, v = y.view(B, 2, N, D).unbind(1)
        shifted = self._shift(t, x)
        dv = self.attention(t, shifted, **self.context)  # the force, laplacian form
        dx = v
        if self.ffn is not None:
            f, jv = self.ffn.joint(shifted, v)
            dx, dv = v + f, dv + jv
        return torch.stack([dx, dv], dim=1).reshape(B, -1)


def _counted_rms(weights: Tensor, dim: int | None) -> Callable[[Tensor], Tensor]:
    """The error norm over the counted entries (``weights`` 1) of a flat state: RMS over ``dim`` (``None``: all)."""
    count = weights.sum(dim=dim)
    return lambda error: (error.square() * weights).sum(dim=dim).div(count).sqrt()


class ContinuousBackbone(nn.Module):
    """One weight-tied block integrated over ``[0, T]``; a drop-in for :class:`~odeformer.backbone.Backbone`."""

    def __init__(
        self,
        depth: int,
        dim: int,
        solver: ContinuousSolver,
        make_attention: Callable[[str], nn.Module],
        make_ffn: Callable[[], nn.Module] | None,
        final_norm: bool = True,
        form: str | None = None,
    ):
        super().__init__()
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive int, got {depth!r}.")
        self.depth, self.solver = depth, solver
        embedding = TimeEmbedding(dim) if solver.time_embedding else None
        self.field = _Field(
            make_attention(solver.form if form is None else form),
            None if make_ffn is None else make_ffn(),
            embedding,
            solver.equation == "wave",
        )
        self.norm = nn.LayerNorm(dim) if final_norm else nn.Identity()
        self.layers: list = []  # no discrete layers: stability warnings and per-layer tools skip this backbone
        self._stats: dict[str, int] = {}

    @property
    def second_order(self) -> bool:
        return self.solver.equation == "wave"

    def solver_stats(self) -> dict[str, int]:
        """``nfe``, ``steps_accepted``, ``steps_rejected`` of the last forward."""
        return dict(self._stats)

    def forward(self, x: Tensor, record: list | None = None, cache: Any = None, **context: Any) -> Tensor:
        """Features ``(B, N, D)``; with a :class:`~odeformer.generate.KVCache` (fixed grid only), ``x`` holds new
        positions only and the field's attention reads the earlier ones' keys and values from it."""
        B, N, D = x.shape
        p = self.solver
        if cache is not None:
            if p.library != "torchdiffeq" or p.method != "rk4" or p.adjoint:
                raise ValueError(
                    f"the continuous solver {p.name!r} chooses its steps from every token, so a key/value cache "
                    "cannot stand for earlier positions; only torchdiffeq's fixed grid (rk4_grid) caches."
                )
            cache.begin(N)
            context = {**context, "cache": cache.layers[0]}
        self.field.shape, self.field.context = (N, D), context
        self.field.reset()
        y0 = torch.cat([x, torch.zeros_like(x)], dim=1).reshape(B, -1) if self.second_order else x.reshape(B, -1)
        times = torch.linspace(0.0, p.T, self.depth + 1 if record is not None else 2, dtype=x.dtype, device=x.device)
        weights = self._error_weights(context.get("attn_mask"), x)
        if p.library == "torchdiffeq":
            ys, stats = self._torchdiffeq(y0, times, weights)
        else:
            ys, stats = self._torchode(y0, times, weights)
        self._stats = stats
        if cache is not None:
            cache.end()
        states = [self._unflatten(y, B, N, D) for y in ys]
        if record is not None:
            record.extend(states)
        final = states[-1]
        return self.norm(final.x if isinstance(final, PhaseState) else final)

    def _error_weights(self, attn_mask: Tensor | None, x: Tensor) -> Tensor | None:
        """``(B, F)`` 0/1 weights of the flat state's entries in the error norm: a token counts if some query may
        attend to it (a sequence with no such token counts all of its own). ``None`` when every token counts."""
        if attn_mask is None:
            return None
        B, N, D = x.shape
        mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))  # (B or 1, H or 1, N or 1, N)
        seen = mask.any(dim=-2).any(dim=1).expand(B, N)  # (B, N): attended by some query of some head
        seen = seen | ~seen.any(dim=1, keepdim=True)
        if bool(seen.all()):
            return None
        copies = 2 if self.second_order else 1  # the wave's flat state is [x, v]
        return seen.to(x.dtype)[:, None, :, None].expand(B, copies, N, D).reshape(B, -1)

    def _unflatten(self, y: Tensor, B: int, N: int, D: int):
        if self.second_order:
            x, v = y.view(B, 2, N, D).unbind(1)
            return PhaseState(x, v)
        return y.view(B, N, D)

    def _torchdiffeq(self, y0: Tensor, times: Tensor, weights: Tensor | None):
        import torchdiffeq

        p = self.solver
        options = (
            {"step_size": p.T / p.steps, "interp": "cubic"} if p.method == "rk4" else {"max_num_steps": p.max_steps}
        )
        if weights is not None and p.method != "rk4":
            options["norm"] = _counted_rms(weights, dim=None)  # one norm for the batch
        solve = torchdiffeq.odeint_adjoint if p.adjoint else torchdiffeq.odeint
        kwargs = {"adjoint_params": tuple(self.field.parameters())} if p.adjoint else {}
        with warnings.catch_warnings():  # fixed-grid methods have no accept/reject callbacks, and say so
            warnings.filterwarnings("ignore", message="Solver .* does not support callbacks")
            ys = solve(self.field, y0, times, method=p.method, rtol=p.rtol, atol=p.atol, options=options, **kwargs)
        f = self.field
        accepted = f.accepted if p.method != "rk4" else p.steps
        return list(ys), {"nfe": f.nfe, "steps_accepted": accepted, "steps_rejected": f.rejected}

    def _torchode(self, y0: Tensor, times: Tensor, weights: Tensor | None):
        import torchode

        p = self.solver
        term = torchode.ODETerm(self.field)
        step = {"dopri5": torchode.Dopri5, "tsit5": torchode.Tsit5}[p.method](term=term)
        norm = {} if weights is None else {"norm": _counted_rms(weights, dim=1)}  # one norm per sample
        controller = torchode.IntegralController(atol=p.atol, rtol=p.rtol, term=term, **norm)
        solver = torchode.AutoDiffAdjoint(step, controller, max_steps=p.max_steps)
        problem = torchode.InitialValueProblem(y0=y0, t_eval=times.expand(y0.shape[0], -1))
        solution = solver.solve(problem)
        if bool((solution.status != 0).any()):
            raise RuntimeError(
                f"torchode did not reach T={p.T} (status {solution.status.tolist()}); raise max_steps "
                "or loosen rtol/atol."
            )
        s = solution.stats
        stats = {
            "nfe": int(s["n_f_evals"].max()),
            "steps_accepted": int(s["n_accepted"].max()),
            "steps_rejected": int((s["n_steps"] - s["n_accepted"]).max()),
        }
        return list(solution.ys.unbind(1)), stats
