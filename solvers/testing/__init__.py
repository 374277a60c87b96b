"""The property kit: test what a stepper declares, each claim a hypothesis property over drawn instances.

Run it on your own scheme::

    from solvers.testing import check_stepper
    check_stepper(MyScheme)                 # or an instance: check_stepper(MyScheme(dim=4, theta0=1.0))
    check_stepper(MyScheme, examples=200)   # a thorough run: more drawn instances per claim
    check_stepper(MyScheme, seed=7)         # the same draws again

``check_stepper`` runs every check the class's declarations call for and raises ``AssertionError`` on the first claim
the scheme does not live up to (``print(stepper_report(MyScheme))`` runs every claim to its end and shows each, passed
and failed, with what it measured), with the claim, the numbers that contradict it and the instance it failed on. Each
claim is checked at fixed points (the problems and steps of earlier versions of this kit, kept as explicit examples)
and then on ``examples`` instances drawn by hypothesis; a failure on a drawn instance is shrunk to the smallest one
hypothesis finds that still fails (fewest steps, smallest shape, magnitude 1, parameters at their start where the
defect allows) and that is the instance the message names. Each run draws from a fresh random seed unless ``seed``
is given (or the active hypothesis profile derandomizes, as this project's ``ci`` profile does); a failure on a drawn
instance ends with the seed and the one line, ``check_stepper(Name, seed=...)``, that draws it again. Hypothesis's
cache of constants read from source files goes to a scratch folder of the process, removed at exit, where the working
directory has no ``.hypothesis`` folder and no storage is configured (``HYPOTHESIS_STORAGE_DIRECTORY``): a check
run from a user's script leaves no folder behind.

What is drawn (:mod:`solvers.testing.strategies`; the contexts in :mod:`solvers.testing.contexts`): states of two
dimensions ``(batch, width)`` and three ``(batch, tokens, width)``, batches of 2 or 3, fields that couple the tokens of
a sample as attention does (a softmax over tokens) and insist on states shaped like ``y``, now and then a state of at
least ``LARGE_STATE`` entries, magnitudes log-uniform over ``MAGNITUDES`` (states and fields scaled together, so the
problem stays the same problem), step sizes of either sign over three decades, horizons up to ``MAX_HORIZON`` steps,
learnable parameters moved by up to two standard normals from their start, and up to three instances of the stepper with
different parameters handing the running state on, as a model's layers do.

The checks (:mod:`~solvers.testing.protocol`, :mod:`~solvers.testing.continuity`, :mod:`~solvers.testing.evals`,
:mod:`~solvers.testing.order`, :mod:`~solvers.testing.geometry`, :mod:`~solvers.testing.layers`; every threshold is a
named constant in :mod:`solvers.testing.thresholds`):

- :func:`check_protocol`: ``step`` returns ``(y1, state)`` with ``y1`` of ``y``'s form; no step writes into anything
  reachable from ``y`` or ``state`` (values, version counters, containers), at any step of the run; the same step
  taken again, or by a copy in the other mode (``eval()``), gives the same ``y1``; a sample's result does not move
  when the other samples of its batch change.
- :func:`check_continuity`: the step is a continuous function of its size and start time, scanned over both on a grid
  that holds a model's exact sizes (1, 1/2, 1/4, ...) and times (``t = 0``): a branch on ``|dt|`` or on a particular
  ``dt`` or ``t`` shows as a jump that stays as the distance halves (one where the scheme's own limit jumps in time
  may go with it).
- :func:`check_gradients`: the gradient of 4 to 8 steps with the state handed on, with respect to ``y0`` and every
  instance's learnable parameters, equals difference quotients; every learnable parameter gets a non-zero gradient.
- :func:`check_precision`: a float32 step agrees with the float64 step from the same state to ``FLOAT32_UNITS``
  float32 rounding units per term of its own arithmetic (each evaluation, and each unit of its coefficients'
  magnitudes).
- :func:`check_contexts`: a step is the same in every context a model runs it in (:class:`Context`: float64, float32,
  float16 or bfloat16; autograd off, on with a state that requires grad, off with one, or ``inference_mode``; bf16 or
  fp16 autocast; one to four threads; deterministic algorithms; called directly, under ``vmap`` (rank-1 rows), ``jvp``,
  functional ``grad``, ``jit.trace`` or ``torch.compile``; a plain function, an ``nn.Module`` with trainable weights in
  training or eval mode, an attention and FFN field, or the ``fields`` you give; contiguous, transposed, sliced,
  channels-last, expanded or broadcast (stride 0) views, 4-D states and several heads up to rank 5; ``t0`` and ``dt`` as
  floats, 0-d tensors or a ``dt`` that requires grad, steps up to ``CONTEXT_MAX_DT``; far start times (past 8192),
  against the reference from the instance's own start on the field shifted in time; the state and field scaled by a
  power of two, against the reference at the instance's own size; transformer sizes and ``CONTEXT_LARGE_STATE`` entries
  as independent tiles) as in the reference (float64, no grad, a plain function): the same evaluations at the same
  times, the same step, inverse and carried step to rounding, in training the same gradient with respect to the state,
  the field's weights and the scheme's own parameters (against a float64 copy) and (against difference quotients) a
  learnable ``dt``. A scheme whose own limit depends on the absolute time or the size (a friction ``r / t`` or ``c tanh
  v``) is compared where the context runs it, its order measured there. Every value of every aspect runs first on a
  fixed instance (:data:`CONTEXTS`), then drawn ones.
- :func:`check_tableau` (if the stepper states its coefficients, ``tableau``): its step is their step
  (``tableau.step``) from the same state, to ``ONE_STEP_RTOL`` times the step's amplification of rounding, at any
  drawn step size, start time, magnitude and size: the claims derived from coefficients hold only for a scheme that
  runs them.
- :func:`check_evals`: each step evaluates the field ``evals_per_step`` times (``- 1`` on a repeated field if
  ``fsal``; the first steps as ``startup_evals`` says), at abscissae ``c`` (times ``t + c dt``) that are the same at
  every ``dt``.
- :func:`check_order`: the error on grids refined to float64's rounding floor falls like ``dt**order`` (slope within
  ``ORDER_TOLERANCE``, local slopes steady within ``STEADY``) on fixed problems (a force whose Jacobian is not
  symmetric, time-dependent nonlinear ones, an uneven grid, moved parameters) and on drawn ones; ``order = 0`` is
  checked by :func:`check_no_limit` (``limit_field`` raises ``ValueError``, the step does not shrink with ``dt``).
- :func:`check_symplectic` (if ``symplectic``): the one-step Jacobian ``M`` has ``Mᵀ J M = J`` and ``det M = 1`` to
  ``SYMPLECTIC_RTOL`` (scaled by ``|M|``) on Hamiltonian problems, and the energy error stays bounded and falls like
  ``dt**order``.
- :func:`check_reversible` (if ``reversible``): ``inverse`` undoes ``step`` and ``step`` undoes ``inverse`` to
  ``REVERSIBLE_RTOL`` relative to the largest magnitude the round trip reaches (and ``step(-dt)`` undoes ``step(dt)``
  if ``symmetric``), each step from a fresh ``init``. Neither judges a step that blows up (growth or ``|M|`` above
  ``BLOWN_UP``): it is outside the scheme's stability region, where rounding says nothing of the claim; a drawn one
  is replaced by another draw, a fixed one taken at a smaller step.
- :func:`check_one_step` (unless ``multistep``): a step from the carried state equals one by an unused copy of the
  stepper from a fresh ``init``, also when instances with different parameters hand the state on.
- :func:`check_layer`: a block stepper's order on its block's ODE, and (:func:`check_layer_protocol`) its protocol on
  drawn blocks. ``check_stepper`` given a built block stepper runs every check above on blocks (attention and an FFN,
  ``BLOCK_TOKENS`` tokens of ``BLOCK_WIDTH`` channels among them), then ``check_layer``.
- :func:`check_in_model`: every claim of every step a model's own forward pass takes (recorded through
  :func:`solvers.iterate`), on its real fields and states, against the same computation in float64 on deep copies.

A scheme defined only on some times (a friction ``r / t`` is singular at ``t = 0``) states them,
``time_domain = (0.0, math.inf)``, and every check keeps its times inside; a step that reaches a singular time of its
own limit without the statement fails with a message naming that time.

What it cannot do: a property holds on the instances drawn, not on every state. A defect that shows only where the
strategies never reach (a magnitude of 1e30, step 10,000, a parameter moved by 100, a device other than the CPU, a path
taken only under ``torch.compile`` or distributed training) passes (:func:`check_in_model` checks what a model of
yours does, on the CPU);
so does a scheme that detects the kit's own problems, or inspects the call stack to find it, or whose defect is
triggered only after millions of steps. An error constant below float64's resolution cannot be measured (coefficients
given to the tableau engine are checked exactly instead). Orders are derived up to ``MAX_ORDER`` (9) by the tableau
engine and measured up to 8 (the error of Yoshida's eighth-order composition falls like ``dt**8`` above the rounding
floor; a fixed problem on which an eighth-order error reaches the floor before it settles, every slope at least 8, is
reported as ``cannot resolve order 8 at this precision`` in ``report["order"].unresolved``, not failed). More examples
search longer, not further. The kit is evidence for a claim, not a proof of it.

The reference of the order check is the flow of ``stepper.limit_field(field)``: the dynamics the scheme claims to
converge to. Problems are built from a seed with ``torch.Generator`` (float64): :mod:`~solvers.testing.problems`
has the builders, :mod:`~solvers.testing.strategies` the hypothesis strategies over them. Do not call a check from
inside a test of your own decorated with ``@given``: hypothesis refuses nested ``@given`` unless that test suppresses
``HealthCheck.nested_given``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import settings

try:
    import hypothesis  # noqa: F401 - the kit's claims are hypothesis properties
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "solvers.testing needs hypothesis (pip install hypothesis, or install this package with its [kit] extra)"
    ) from error

from .._base import AbstractStepper
from . import thresholds as th
from ._common import _instance, _name, _one_thread, is_block, reachable_tensors
from ._drawn import seeded
from .contexts import CONTEXTS, REFERENCE, Context, check_contexts
from .continuity import check_continuity
from .evals import RecordingField, check_evals
from .geometry import check_reversible, check_symplectic
from .layers import check_layer, check_layer_protocol
from .model import check_in_model, record_steps
from .order import OrderMeasurement, check_no_limit, check_order, measure_order
from .problems import (
    Problem,
    anharmonic_problem,
    block_problem,
    coupled_problem,
    default_problems,
    linear_problem,
    nonlinear_problem,
    oscillator_problem,
    pendulum_problem,
    row_problem,
    scaled,
    stepper_width,
    token_problem,
)
from .protocol import check_gradients, check_one_step, check_precision, check_protocol
from .references import reference
from .strategies import (
    Instance,
    anharmonic_problems,
    coupled_problems,
    instances,
    linear_problems,
    nonlinear_problems,
    oscillator_problems,
    pendulum_problems,
    problems,
    scaled_problems,
)
from .tableau import check_tableau, stated_tableau
from .thresholds import ORDER_TOLERANCE

__all__ = [
    "ORDER_TOLERANCE",
    "Instance",
    "OrderMeasurement",
    "Problem",
    "RecordingField",
    "anharmonic_problem",
    "anharmonic_problems",
    "block_problem",
    "check_contexts",
    "check_continuity",
    "check_evals",
    "CONTEXTS",
    "REFERENCE",
    "Context",
    "check_gradients",
    "check_in_model",
    "check_layer",
    "check_layer_protocol",
    "check_no_limit",
    "check_one_step",
    "check_order",
    "check_precision",
    "check_protocol",
    "check_reversible",
    "check_stepper",
    "ClaimResult",
    "StepperReport",
    "stepper_report",
    "check_symplectic",
    "check_tableau",
    "stated_tableau",
    "coupled_problem",
    "coupled_problems",
    "default_problems",
    "instances",
    "linear_problem",
    "linear_problems",
    "measure_order",
    "nonlinear_problem",
    "nonlinear_problems",
    "oscillator_problem",
    "oscillator_problems",
    "pendulum_problem",
    "pendulum_problems",
    "problems",
    "reachable_tensors",
    "record_steps",
    "reference",
    "row_problem",
    "scaled",
    "scaled_problems",
    "stepper_width",
    "token_problem",
]


def check_stepper(
    stepper: AbstractStepper | type[AbstractStepper],
    dim: int | None = None,
    examples: int = th.EXAMPLES,
    seed: int | None = None,
    fields: Any = None,
) -> dict[str, Any]:
    """Run every check the stepper's declarations call for; return what was measured.

    ``dim`` is the width of the states the fixed problems have; by default the width of the stepper's per-channel
    parameters (``MyScheme(dim=6)``), else 4 for a first-order and 2 for a second-order scheme (drawn instances draw
    it where the stepper does not fix it). ``examples`` is how many instances each claim is checked on besides its
    fixed points (``EXAMPLES`` by default; more for a thorough run, and the order check a tenth of them, at least
    ``ORDER_EXAMPLES``).

    ``seed`` fixes what is drawn (by default one is chosen: 0 under a derandomized hypothesis profile, else at random;
    the report's ``"seed"``); a failure names it with a one-line call that reproduces it. Draws keep no example
    database: no ``.hypothesis/`` folder appears in the working directory.

    ``fields``, ``fields(width, seed) -> f(t, x)`` for states ``(batch, tokens, width)``, adds your own field (your
    model's attention and FFN) to the fields :func:`check_contexts` draws.

    Given a block stepper (:class:`~solvers.Split`, :class:`~solvers.Whole`, or one of your own stepping on a
    :class:`~solvers.Block` and declaring ``steps_on_blocks = True``) it runs every check on blocks and then
    :func:`check_layer` (``report["layer"]``); given a block stepper's class it says to check a built one.
    """
    if isinstance(stepper, type) and getattr(stepper, "steps_on_blocks", False):
        raise TypeError(
            f"{stepper.__name__} is a block stepper: it steps on a solvers.Block, so check a built one with "
            f"solvers.testing.check_layer({stepper.__name__}(...)) (check_stepper given one runs that check)."
        )
    chosen = seed if seed is not None else (0 if settings.default.derandomize else random.randrange(2**32))
    try:
        with seeded(chosen), _one_thread():
            report = _check_stepper(stepper, dim, examples, fields)
        report["seed"] = chosen
        return report
    except AssertionError as error:
        what = stepper if isinstance(stepper, type) else type(stepper)
        call = f"check_stepper({what.__module__}.{what.__qualname__}, seed={chosen}"
        call += (f", dim={dim}" if dim is not None else "") + f", examples={examples}"
        call += ", fields=<the same fields>)" if fields is not None else ")"
        # an exception the scheme raised stays the cause (its traceback)
        raise AssertionError(f"{error}\n  seed {chosen}; reproduce with: {call}") from error.__cause__


def _declarations(stepper: AbstractStepper) -> None:
    """The declarations themselves: the right kinds, and consistent with each other."""
    name = _name(stepper)
    for attr, kind in (
        ("order", int),
        ("evals_per_step", int),
        ("second_order", bool),
        ("symplectic", bool),
        ("reversible", bool),
        ("symmetric", bool),
        ("fsal", bool),
        ("multistep", bool),
    ):
        value = getattr(stepper, attr)
        least = 0 if attr == "order" else 1  # order 0: no small-step limit
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < least)):
            wanted = "bool" if kind is bool else ("non-negative int" if least == 0 else "positive int")
            raise AssertionError(f"{name}.{attr} must be a {wanted}, got {value!r}.")
    if stepper.symmetric and not stepper.reversible:
        raise AssertionError(f"{name} declares symmetric (step(-dt) undoes step(dt)) but not reversible.")
    startup = stepper.startup_evals
    if not (
        isinstance(startup, tuple) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in startup)
    ):
        raise AssertionError(f"{name}.startup_evals must be a tuple of non-negative ints, got {startup!r}.")
    if startup and not stepper.multistep:
        raise AssertionError(f"{name} declares startup_evals, which only a multistep scheme has (it builds a history).")


def _claims(stepper: AbstractStepper, dim: int | None, examples: int, fields: Any) -> list[tuple[str, Any]]:
    """``(claim, check)`` for every claim the stepper's declarations call for, in the order they are checked; each
    check returns what it measured."""
    if is_block(stepper):  # it steps on a Block: every check a stepper gets, on layers' blocks
        claims = [
            ("protocol", lambda: check_protocol(stepper, dim, examples)),
            ("evaluations", lambda: check_evals(stepper, dim=dim, examples=examples) or stepper.evals_per_step),
            ("contexts", lambda: check_contexts(stepper, dim, examples, fields=fields)),
            ("precision", lambda: check_precision(stepper, dim, examples)),
            ("continuity", lambda: check_continuity(stepper, dim)),  # before the gradients: a jump is named as one
            ("gradients", lambda: check_gradients(stepper, dim, examples)),
            ("order", lambda: check_order(stepper, dim=dim, examples=max(th.ORDER_EXAMPLES, examples // 10))),
            ("layer", lambda: check_layer(stepper, examples=0)),
        ]
        if not stepper.multistep:
            claims.append(("one_step", lambda: check_one_step(stepper, dim=dim, examples=examples)))
        return claims

    def evals() -> int:
        check_evals(stepper, dim=dim, examples=examples)
        return stepper.evals_per_step

    def gradients() -> None:
        check_gradients(stepper, dim, examples)

    def order() -> Any:
        if stepper.order == 0:
            return check_no_limit(stepper, default_problems(stepper, dim)[-1])
        return check_order(stepper, dim=dim, examples=max(th.ORDER_EXAMPLES, examples // 10))

    claims: list[tuple[str, Any]] = [("protocol", lambda: check_protocol(stepper, dim, examples))]
    try:
        states = stated_tableau(stepper) is not None
    except AssertionError as error:  # its coefficients() raised: the tableau claim fails with the cause
        message = str(error)
        states = False

        def unreadable() -> None:
            raise AssertionError(message)

        claims.append(("tableau", unreadable))
    if states:
        claims.append(("tableau", lambda: check_tableau(stepper, dim, examples)))
    claims += [
        ("evaluations", evals),
        ("contexts", lambda: check_contexts(stepper, dim, examples, fields=fields)),
        ("precision", lambda: check_precision(stepper, dim, examples)),
        ("continuity", lambda: check_continuity(stepper, dim)),  # before the gradients: a jump is named as one
        ("gradients", gradients),
        ("order", order),
    ]
    if stepper.symplectic:
        claims.append(("symplectic", lambda: check_symplectic(stepper, dim=dim, examples=examples)))
    if stepper.reversible:
        claims.append(("reversible", lambda: check_reversible(stepper, dim=dim, examples=examples)))
    if not stepper.multistep:
        claims.append(("one_step", lambda: check_one_step(stepper, dim=dim, examples=examples)))
    return claims


def _check_stepper(
    stepper: AbstractStepper | type[AbstractStepper], dim: int | None, examples: int, fields: Any = None
) -> dict[str, Any]:
    stepper = _instance(stepper)
    from .._splitting import _BlockStepper

    if not isinstance(stepper, _BlockStepper):
        _declarations(stepper)
    report: dict[str, Any] = {}
    for claim, check in _claims(stepper, dim, examples, fields):
        dtype = torch.get_default_dtype()
        try:
            measured = check()
        except AssertionError:
            _default_dtype_kept(stepper, claim, dtype)  # a default dtype the step moved is the cause
            raise
        except Exception as error:  # noqa: BLE001 - the scheme's own code may raise anything: the claim and the seed
            _default_dtype_kept(stepper, claim, dtype)
            said = " ".join(f"{error}".split())[:400]
            drawn = " ".join(" ".join(getattr(error, "__notes__", ())).split())[:400]  # hypothesis's example
            raise AssertionError(
                f"{_name(stepper)} raised {type(error).__name__} ({said}) while its {claim} claim was checked"
                + (f"; {drawn}" if drawn else "")
                + "."
            ) from error
        _default_dtype_kept(stepper, claim, dtype)
        if claim not in ("evaluations", "gradients"):
            report[claim] = measured
    return report


def _default_dtype_kept(stepper: AbstractStepper, claim: str, dtype: torch.dtype) -> None:
    """An ``AssertionError`` (the default dtype put back) where checking ``claim`` left torch's default dtype other
    than ``dtype``: only the scheme's code runs besides the kit's, which sets none."""
    now = torch.get_default_dtype()
    if now != dtype:
        torch.set_default_dtype(dtype)
        raise AssertionError(
            f"{_name(stepper)}.step changed torch's default dtype ({dtype} to {now}) while its {claim} claim was "
            "checked: a step leaves what it does not own as it found it (every tensor its caller makes next would be "
            f"{now})."
        )


_FIGURES = {
    "protocol": "gradient vs difference quotients (relative)",
    "continuity": "largest jump where its limit jumps too (relative)",
    "evaluations": "evaluations a step",
    "tableau": "largest defect against its coefficients' step (relative)",
    "contexts": "largest defect against the reference context (relative)",
    "precision": "largest float32 defect (rounding units)",
    "order": "slopes",
    "reversible": "largest round-trip defect (relative)",
    "one_step": "largest carried-vs-fresh defect (relative)",
}
"""What each claim's figure is, in a report."""


def _figure(value: Any) -> str:
    """What a check measured, in a few characters."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        shown = "[" + ", ".join(f"{v:.3g}" for v in value) + "]"
        unresolved = getattr(value, "unresolved", ())
        return shown + (f"; {unresolved[0].split(':')[0]} on {len(unresolved)} problem(s)" if unresolved else "")
    if isinstance(value, dict):
        shown = {k: v for k, v in value.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        return ", ".join(f"{k} {_figure(v) if not isinstance(v, str) else v}" for k, v in shown.items())
    if isinstance(value, OrderMeasurement):
        return f"slope {value.slope:.3g}"
    text = " ".join(str(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class ClaimResult:
    """One claim of a :class:`StepperReport`: whether it held, what was measured, and the failure's message."""

    claim: str
    passed: bool
    figure: str
    message: str | None
    seconds: float


@dataclass(frozen=True)
class StepperReport:
    """Every claim a stepper's declarations call for, passed and failed, with what was measured (``str`` is a table);
    ``passed`` when every claim held. ``seed`` draws the same instances again (``stepper_report(cls, seed=...)``)."""

    stepper: str
    seed: int
    results: tuple[ClaimResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> tuple[ClaimResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    def __str__(self) -> str:
        width = max([len(r.claim) for r in self.results] + [5])
        lines = [
            f"{self.stepper} (seed {self.seed}): {len(self.results) - len(self.failed)} of "
            f"{len(self.results)} claims hold"
        ]
        for r in self.results:
            verdict = "pass" if r.passed else "FAIL"
            lines.append(f"  {r.claim:<{width}}  {verdict}  {r.seconds:5.1f}s  {r.figure}")
            if r.message:
                lines.extend("      " + line for line in r.message.splitlines())
        return "\n".join(lines)


def stepper_report(
    stepper: AbstractStepper | type[AbstractStepper],
    dim: int | None = None,
    examples: int = th.EXAMPLES,
    seed: int | None = None,
    fields: Any = None,
) -> StepperReport:
    """Run every check :func:`check_stepper` runs, each to its end whatever the others found, and return a
    :class:`StepperReport`: every claim, passed or failed, with its figures (slopes, largest defects, rounding units,
    evaluations) and a failure's message; a check in which the scheme raises (a Python branch on a tensor's value under
    ``vmap``, say) fails that claim with the error, and the others still run. ``print(stepper_report(MyScheme))`` shows
    the table. Declarations that are not of the right kind fail the first row and nothing else runs (no check can trust
    them). Arguments as for :func:`check_stepper`."""
    chosen = seed if seed is not None else (0 if settings.default.derandomize else random.randrange(2**32))
    built = _instance(stepper)
    from .._splitting import _BlockStepper

    results: list[ClaimResult] = []
    if not isinstance(built, _BlockStepper):
        try:
            _declarations(built)
        except AssertionError as error:
            return StepperReport(_name(built), chosen, (ClaimResult("declarations", False, "", str(error), 0.0),))
        results.append(ClaimResult("declarations", True, "", None, 0.0))
    with seeded(chosen), _one_thread():
        for claim, check in _claims(built, dim, examples, fields):
            start = time.perf_counter()
            try:
                measured = check()
            except AssertionError as error:
                results.append(ClaimResult(claim, False, "", str(error), time.perf_counter() - start))
            except Exception as error:  # the scheme raised (a Python branch on a value under vmap, say): that claim
                message = f"{_name(built)} raised {type(error).__name__} in this check: {error}"
                results.append(ClaimResult(claim, False, "", message, time.perf_counter() - start))
            else:
                figure = _figure(measured)
                label = _FIGURES.get(claim, "")
                figure = f"{label}: {figure}" if label and figure else figure
                results.append(ClaimResult(claim, True, figure, None, time.perf_counter() - start))
    return StepperReport(_name(built), chosen, tuple(results))
