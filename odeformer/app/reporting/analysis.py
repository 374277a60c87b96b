"""The analysis report: a scheme's stability region, dispersion and error constant, or a trained model's stability
atlas and refinement, as Markdown with PNGs beside it (the numbers come from :mod:`solvers.analysis` and
:mod:`odeformer.atlas`; this module only draws and writes them).

- ``region.png``: a first-order scheme's ``|R(z)| = 1`` on ``z = λ dt`` with its real and imaginary stability
  intervals marked; a second-order scheme's on ``z = μ dt²`` (``x'' = μ x``) with the oscillator's interval
  ``(ω dt)² ≤ r²`` marked on the negative real axis.
- ``dispersion.png`` (second-order schemes): the phase and amplitude errors per step against ``ω dt``.
- ``atlas.png`` (a run): every layer's measured eigenvalues ``dt·λ`` (``dt²·λ``) over its scheme's region, and
  ``headroom.png``, ``contraction.png``: per layer, the headroom and the predicted and measured contraction.
- ``refinement.png``: the logits' change against ``k``, each layer's step split into ``k`` steps of ``dt/k``.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import torch

from ... import atlas as atlas_module
from .. import files
from .plots import pyplot


def finite(value: Any, spelled: bool = True) -> Any:
    """A value for JSON: ``inf`` as the string ``"inf"`` (JSON has no infinity; None unless ``spelled``), NaN as None,
    tuples as lists, recursively."""
    if isinstance(value, float) and math.isinf(value):
        return ("inf" if value > 0 else "-inf") if spelled else None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v, spelled) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, spelled) for v in value]
    return value


def _interval(value: Any) -> str:
    return "unbounded" if isinstance(value, float) and math.isinf(value) else f"{value:.6g}"


def _title(text: str, width: int = 52) -> str:
    """A figure's title wrapped to its width (a long one is cut off at the figure's edge)."""
    return textwrap.fill(text, width)


def _time_dependent(stepper: Any) -> bool:
    """Whether the scheme's step on ``y' = -y`` (``x'' = -x``) at ``t = 0`` differs from the one at ``t = 0.75``: its
    coefficients change with the time, and an analysis holds at one time only."""
    from solvers import PhaseState

    try:
        copy = atlas_module._float64(stepper)
        y: Any = torch.ones(1, 2, 3, dtype=torch.float64)
        y = PhaseState(y, 0.5 * y) if copy.second_order else y
        steps = []
        for t in (0.0, 0.75):
            with torch.no_grad():
                y1, _ = copy.step(lambda t, z: -z, t, y, 0.1, copy.init(lambda t, z: -z, t, y))
            steps.append(torch.cat([y1.x, y1.v]) if isinstance(y1, PhaseState) else y1)
        return not torch.allclose(*steps, rtol=1e-12, atol=0.0)
    except Exception:  # noqa: BLE001 - a probe: a scheme that cannot take it is analysed as it is
        return False


def _plain(value: Any) -> str:
    return "unbounded" if value is None or (isinstance(value, float) and math.isinf(value)) else f"{value:.4g}"


def scheme_verdicts(numbers: dict[str, Any], time_dependent: bool) -> list[str]:
    """What a scheme's numbers mean, in words: its order, where it is stable, its phase and amplitude errors, its error
    constant (or why there is none), and at which time a time-dependent scheme was analysed."""
    order = numbers["order"]
    said = [
        f"Order {order}: halving dt divides a step-size-limited error by about {2**order}."
        if order > 0
        else "Order 0: part of the step does not shrink with dt, so there is no small-step limit (refining does not "
        "converge)."
    ]
    if numbers["second_order"]:
        r = numbers.get("oscillator_stability_interval")
        said.append(
            f"An oscillation x'' = −ω²x is stable for ω·dt up to {_plain(r)}; a wave layer's field (ω² up to 2 for a "
            f"symmetric attention) is stable for dt up to {_plain(None if r is None or math.isinf(r) else r / 2**0.5)}."
        )
        phase, amplitude = numbers.get("dispersion_order"), numbers.get("dissipation_order")
        if numbers.get("dispersion_note"):
            said.append(f"No phase or amplitude error is defined: {numbers['dispersion_note']}")
        else:
            said.append(
                ("Its phase is exact (no dispersion)" if phase is None else f"Its phase errs by O((ω dt)^{phase})")
                + " and "
                + (
                    "it keeps the amplitude (no dissipation: the oscillation's energy neither decays nor grows)."
                    if amplitude is None
                    else f"its amplitude changes by O((ω dt)^{amplitude}) per step."
                )
            )
    else:
        real, imaginary = numbers.get("real_stability_interval"), numbers.get("imaginary_stability_interval")
        half = None if real is None or math.isinf(real) else real / 2
        said.append(
            f"On a decaying spectrum (negative real λ, diffusion's) it is stable for dt·|λ| up to {_plain(real)}: a "
            f"laplacian attention layer with symmetric attention (λ in [−2, 0]) for dt up to {_plain(half)}."
        )
        said.append(
            "On an oscillating spectrum (imaginary λ) no step is stable: waves grow at any dt."
            if imaginary == 0
            else f"On an oscillating spectrum (imaginary λ) it is stable for dt·|λ| up to {_plain(imaginary)}."
        )
    if numbers.get("principal_error_norm") is None:
        said.append(
            "No error constant: it is read from a scheme's coefficients (a Butcher or Nyström tableau, a splitting), "
            "and this one gives none; its measured errors are in solvers.testing.stepper_report."
        )
    else:
        said.append(
            f"Its principal error norm is {numbers['principal_error_norm']:.4g}: of two schemes of one order, the one "
            "with the smaller norm makes the smaller error."
        )
    if time_dependent:
        said.append("Its step depends on the time t: every number here is at t = 0 (an analysis holds one t).")
    return said


def scheme_report(stepper: Any, label: str, out: Path) -> dict[str, Any]:
    """Analyse ``stepper`` (:func:`solvers.analysis.analyze`), draw its figures into ``out``, write ``report.md``
    ending with its verdicts in words (:func:`scheme_verdicts`); return the numbers."""
    from solvers import analysis

    numbers = analysis.analyze(stepper)
    files.folder(out)
    plt = pyplot()
    second = numbers["second_order"]
    reach = 4.0
    if second and math.isfinite(numbers.get("oscillator_stability_interval") or math.inf):
        reach = max(4.0, 1.3 * numbers["oscillator_stability_interval"] ** 2)
    elif not second and math.isfinite(numbers.get("real_stability_interval") or math.inf):
        reach = max(3.0, 1.3 * numbers["real_stability_interval"])
    tall = 0.8 * reach
    imaginary = numbers.get("imaginary_stability_interval")
    if not second and imaginary is not None and math.isfinite(imaginary):
        tall = max(tall, 1.3 * imaginary)
    region = analysis.stability_region(stepper, real=(-reach, 0.25 * reach), imag=(-tall, tall))
    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    radius = torch.tensor(region.radius).clamp(max=3.0)
    axis.contourf(region.real, region.imag, radius <= 1.0, levels=[0.5, 1.5], colors=["#cfe3f5"])
    axis.contour(region.real, region.imag, radius, levels=[1.0], colors=["#1f5f9f"])
    axis.axhline(0, color="grey", lw=0.5)
    axis.axvline(0, color="grey", lw=0.5)
    if second:
        r = numbers.get("oscillator_stability_interval")
        if r is not None and math.isfinite(r):
            axis.plot([-(r**2), 0], [0, 0], color="#c0392b", lw=3, label=f"oscillator: ω dt ≤ {r:.4g}")
        axis.set_xlabel("Re μ dt²")
        axis.set_ylabel("Im μ dt²")
    else:
        r, i = numbers.get("real_stability_interval"), numbers.get("imaginary_stability_interval")
        if r is not None and math.isfinite(r):
            axis.plot([-r, 0], [0, 0], color="#c0392b", lw=3, label=f"real interval {r:.4g}")
        if i is not None and math.isfinite(i) and i > 0:
            axis.plot([0, 0], [-i, i], color="#27ae60", lw=3, label=f"imaginary interval {i:.4g}")
        axis.set_xlabel("Re λ dt")
        axis.set_ylabel("Im λ dt")
    axis.set_title(_title(f"{label}: stability region (spectral radius ≤ 1)"), fontsize=10)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    files.write_figure(out / "region.png", figure, dpi=120)
    at_least = " (at least: every condition the engine derives holds)" if numbers.get("order_at_least") else ""
    lines = [f"# Analysis of {label}", "", f"Order {numbers['order']}{at_least}.", ""]
    figures = ["region.png"]
    if second:
        lines.append(f"- oscillator stability interval in ω·dt: {_interval(numbers['oscillator_stability_interval'])}")
        orders = numbers.get("dispersion_order"), numbers.get("dissipation_order")
        shown = [f"{o}" if o is not None else "none (exact)" for o in orders]
        if numbers.get("dispersion_note"):
            shown = ["not defined"] * 2
            lines.append(f"- dispersion and dissipation: {numbers['dispersion_note']}")
        lines.append(f"- dispersion order: {shown[0]}; dissipation order: {shown[1]}")
        top = numbers.get("oscillator_stability_interval") or 2.0
        top = min(top, 4.0) if math.isfinite(top) else 4.0
        try:
            measured = analysis.dispersion(stepper, [top * k / 60 for k in range(1, 60)])
        except ValueError:
            measured = None
        if measured is not None:
            figures.append(_dispersion_plot(plt, measured, label, out))
    else:
        if numbers.get("stability_polynomial") is not None:
            shown = numbers.get("stability_polynomial_exact") or [f"{c:.6g}" for c in numbers["stability_polynomial"]]
            lines.append("- stability polynomial R(z), coefficients from z⁰ up: " + ", ".join(shown))
        lines.append(f"- real stability interval: {_interval(numbers['real_stability_interval'])}")
        lines.append(f"- imaginary stability interval: {_interval(numbers['imaginary_stability_interval'])}")
    error = numbers.get("principal_error_norm")
    lines.append(
        f"- principal error norm: {'none (no coefficients to read it from)' if error is None else f'{error:.6g}'}"
    )
    numbers["time_dependent"] = _time_dependent(stepper)
    lines += ["", *(f"![{f[:-4]}]({f})" for f in figures), "", "## Verdicts", ""]
    lines += [f"- {line}" for line in scheme_verdicts(numbers, numbers["time_dependent"])] + [""]
    files.write_text(out / "report.md", "\n".join(lines))
    return numbers


FLOOR = 1e-16
"""The smallest error a dispersion plot shows: below it, double precision's rounding (a drawn zero has no place on a
log axis)."""


def _dispersion_plot(plt: Any, measured: Any, label: str, out: Path) -> str:
    """``dispersion.png``: the phase and amplitude errors per step against ``ω dt`` on a log axis that starts at
    :data:`FLOOR` (an error below it, an exact zero included, is drawn on the floor)."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for values, name in ((measured.phase_error, "|phase error|"), (measured.amplitude_error, "|amplitude error|")):
        axis.semilogy(measured.omega_dt, [max(abs(v), FLOOR) for v in values], label=name)
    axis.set_ylim(bottom=FLOOR / 2)
    axis.set_xlabel("ω dt")
    axis.set_ylabel(f"error per step (floor {FLOOR:g}: rounding)")
    axis.set_title(_title(f"{label}: dispersion and dissipation"), fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    files.write_figure(out / "dispersion.png", figure, dpi=120)
    return "dispersion.png"


def _region_grid(stepper: Any, dt: float, power: int, reach: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where the layer's scheme (its parameters, per channel) is stable at its step ``dt``, on a grid of the plotted
    variable ``z = dt λ`` (``dt² λ`` for a second-order scheme): ``λ = z / dt^power``."""
    re = torch.linspace(-reach, 0.3 * reach, 80, dtype=torch.float64)
    im = torch.linspace(-0.7 * reach, 0.7 * reach, 80, dtype=torch.float64)
    grid = torch.complex(re[None, :].expand(80, -1), im[:, None].expand(-1, 80))
    inside = atlas_module.inside(stepper, dt, grid.reshape(-1) / dt**power).reshape(80, 80)
    return re, im, inside


def run_report(layers: list[dict[str, Any]], steppers: list[Any], label: str, out: Path) -> list[str]:
    """The atlas's figures for one run into ``out``; return their file names."""
    from matplotlib.ticker import MaxNLocator

    files.folder(out)
    plt = pyplot()
    count = len(layers)
    columns = min(count, 4)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows + 0.4), squeeze=False)
    for entry, stepper, axis in zip(layers, steppers, axes.flat):
        power = 2 if entry["second_order"] else 1
        points = [complex(re, im) * entry["dt"] ** power for re, im in entry["eigenvalues"]]
        reach = max([abs(p.real) for p in points] + [abs(p.imag) for p in points] + [1.0]) * 1.4
        if power == 2:  # x'' = λ x oscillates only on the negative real axis: the region there, as a band
            reach = max(reach, 5.0)  # far enough to show where the oscillator's interval ends (Verlet: −4)
            tall = max([abs(p.imag) for p in points] + [0.05 * reach]) * 1.3
            line = torch.linspace(-reach, 0, 400, dtype=torch.float64)
            stable = atlas_module.inside(stepper, entry["dt"], torch.complex(line, 0 * line) / entry["dt"] ** 2)
            axis.fill_between(line, -0.08 * tall, 0.08 * tall, where=stable.numpy(), color="#9cc3e6", step="mid")
            axis.set_ylim(-tall, tall)
        else:
            re, im, inside = _region_grid(stepper, entry["dt"], power, reach)
            axis.contourf(re, im, inside.double(), levels=[0.5, 1.5], colors=["#cfe3f5"])
        axis.scatter([p.real for p in points], [p.imag for p in points], s=9, color="#c0392b", zorder=3)
        axis.axhline(0, color="grey", lw=0.5)
        axis.axvline(0, color="grey", lw=0.5)
        axis.set_title(f"layer {entry['layer']}: headroom {entry['headroom']:.3g}", fontsize=9)
        axis.set_xlabel("Re dt²λ" if power == 2 else "Re dt λ", fontsize=8)
        axis.set_ylabel("Im dt²λ" if power == 2 else "Im dt λ", fontsize=8)
    for axis in list(axes.flat)[count:]:
        axis.axis("off")
    figure.suptitle(
        _title(f"{label}: measured spectrum (red) over the scheme's region (blue)", 22 * columns), fontsize=10
    )
    figure.tight_layout()
    files.write_figure(out / "atlas.png", figure)
    for name, ylabel, title in (
        ("headroom", "headroom (factor on dt)", "stability headroom per layer"),
        ("contraction", "Dirichlet energy after / before", "contraction of the mean-free part per layer"),
    ):
        figure, axis = plt.subplots(figsize=(5.5, 3.8))
        index = [entry["layer"] for entry in layers]
        if name == "headroom":
            axis.semilogy(index, [max(entry["headroom"], 1e-3) for entry in layers], marker="o")
            axis.axhline(1.0, color="#c0392b", lw=0.8, ls="--", label="1: the step at its region's edge")
        else:
            axis.plot(index, [e["predicted_contraction"] for e in layers], marker="o", label="predicted (linearised)")
            axis.plot(index, [e["measured_contraction"] for e in layers], marker="s", label="measured (the layer)")
            axis.axhline(1.0, color="grey", lw=0.5)
        axis.set(xlabel="layer", ylabel=ylabel)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(_title(f"{label}: {title}"), fontsize=10)
        axis.legend(fontsize=8)
        figure.tight_layout()
        files.write_figure(out / f"{name}.png", figure, dpi=120)
    return ["atlas.png", "headroom.png", "contraction.png"]


def refinement_plot(found: dict[str, Any], label: str, out: Path) -> str:
    """``refinement.png``: the logits' change against the finest ``k``; return its file name."""
    plt = pyplot()
    rows = [row for row in found["refinement"] if row["logit_change"] > 0]
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    axis.loglog([row["k"] for row in rows], [row["logit_change"] for row in rows], marker="o", label="logits")
    axis.loglog([row["k"] for row in rows], [row["hidden_change"] for row in rows], marker="s", label="last state")
    order = found.get("observed_order")
    axis.set_title(
        _title(f"{label}: refinement (observed order {'–' if order is None else f'{order:.2f}'})"), fontsize=10
    )
    axis.set_xlabel("k (each layer's step as k steps of dt/k)")
    axis.set_ylabel("relative change vs the finest k")
    axis.legend(fontsize=8)
    figure.tight_layout()
    files.write_figure(out / "refinement.png", figure, dpi=120)
    return "refinement.png"


def write_json(path: Path, numbers: Any) -> None:
    """``numbers`` as JSON (:func:`finite`) at ``path``, never through a link."""
    files.write_text(files.folder(Path(path).parent) / Path(path).name, json.dumps(finite(numbers), indent=2) + "\n")


def run_verdicts(numbers: dict[str, Any]) -> list[str]:
    """What a run's atlas and refinement mean, in words: whether every step is inside its scheme's region (and the
    tightest layer), the modes that grow whatever the step, how far the attention's linearisation explains each
    layer's contraction, and whether refining the steps converges as a discretisation of one ODE would (the
    refinement's ``verdict``, :func:`odeformer.atlas.verdict`)."""
    layers = numbers["layers"]
    low = min(layers, key=lambda entry: entry["headroom"])
    said = [
        f"Every layer's step is inside its scheme's stability region on its measured spectrum; the tightest is layer "
        f"{low['layer']}, whose dt could grow by a factor {low['headroom']:.3g}."
        if low["headroom"] >= 1
        else f"Layer {low['layer']}'s step is outside its scheme's stability region (headroom {low['headroom']:.3g} < "
        "1): a mode of its measured spectrum grows from step to step; a smaller model.dt brings it inside."
    ]
    growing = sum(entry["growing"] for entry in layers)
    if growing:
        said.append(
            f"{growing} measured eigenvalues (over all layers) have a positive real part: their exact flow grows, so "
            "no step makes them decay, and they set no bound on dt."
        )
    above = [e["layer"] for e in layers if e["measured_contraction"] > 1.1 * e["predicted_contraction"]]
    below = [e["layer"] for e in layers if e["measured_contraction"] < e["predicted_contraction"] / 1.1]
    agree = len(layers) - len(above) - len(below)
    said.append(
        f"Predicted contraction (the scheme stepping the attention field's linearisation, nothing else) and measured "
        f"(the whole layer) agree within 10 % in {agree} of {len(layers)} layers: there the attention explains how the "
        "layer spreads or smooths the tokens."
    )
    if above:
        said.append(
            f"In {_layers(above)} the layer spreads the tokens more than its attention predicts: "
            "what the layer adds besides the linearised attention (the FFN, the normalisation, attention's own "
            "non-linearity) pushes them apart."
        )
    if below:
        said.append(f"In {_layers(below)} the layer smooths the tokens more than predicted.")
    if not numbers.get("small_step_limit", True):
        said.append("A layer's step has a part that does not shrink with dt (order 0): refinement cannot converge.")
    elif numbers.get("verdict"):
        said.append(numbers["verdict"])  # the refinement's, odeformer.atlas.verdict: is the trained model an ODE?
    return said


def _layers(indices: list[int]) -> str:
    return f"layer{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))}"


def run_markdown(numbers: dict[str, Any], model: Any, out: Path, title: str | None = None) -> str:
    """The figures and ``report.md`` of a run's atlas (and refinement) into ``out``, ending with its verdicts in words
    (:func:`run_verdicts`); return the Markdown."""
    label = f"{numbers['solver']} (depth {numbers['depth']})"
    figures = run_report(numbers["layers"], [layer.stepper for layer in model.backbone.layers], label, out)
    if "refinement" in numbers:
        figures.append(refinement_plot(numbers, label, out))
    lines = [f"# {title or f'Stability atlas of {label}'}", "", f"Run: `{numbers['run']}`.", ""]
    lines.append("| layer | dt | largest \\|λ\\| | headroom | growing | predicted contraction | measured contraction |")
    lines.append("|---|---|---|---|---|---|---|")
    for entry in numbers["layers"]:
        largest = max((abs(complex(re, im)) for re, im in entry["eigenvalues"]), default=0.0)
        lines.append(
            f"| {entry['layer']} | {entry['dt']:g} | {largest:.3g} | {entry['headroom']:.3g} | {entry['growing']} | "
            f"{entry['predicted_contraction']:.4f} | {entry['measured_contraction']:.4f} |"
        )
    if "refinement" in numbers:
        limit = numbers.get("limit")
        lines += ["", "| k | logit change | last-state change | distance from the ODE's solution | "
                  f"{numbers['metric']} |", "|---|---|---|---|---|"]  # fmt: skip
        for row in numbers["refinement"]:
            metric = "–" if row.get("metric") is None else f"{row['metric']:.4f}"
            distance = "–" if row.get("limit_change") is None else f"{row['limit_change']:.3g}"
            lines.append(
                f"| {row['k']:g} | {row['logit_change']:.3g} | {row['hidden_change']:.3g} | {distance} | {metric} |"
            )
        if limit is not None and "unsolved" in limit:
            lines.append(f"| ODE ({limit['method']}) | not solved: {limit['unsolved']} | – | – | – |")
        elif limit is not None:
            metric = "–" if limit.get("metric") is None else f"{limit['metric']:.4f}"
            solver = f"ODE ({limit['method']}, {limit['evaluations']} evaluations)"
            lines.append(f"| {solver} | {limit['logit_change']:.3g} | – | 0 | {metric} |")
        order, local = numbers.get("observed_order"), numbers.get("local_orders") or []
        read = ""
        if len(local) >= 2:
            shown = ", ".join("–" if p is None else f"{p:.2f}" for p in local)
            read = f" (least squares over every k); from each difference to the next: {shown} (the last the finest)"
        lines += ["", f"Observed order: {'–' if order is None else f'{order:.2f}'}{read}."]
    lines += ["", *(f"![{f[:-4]}]({f})" for f in figures), "", "## Verdicts", ""]
    lines += [f"- {line}" for line in run_verdicts(numbers)] + [""]
    text = "\n".join(lines)
    files.write_text(out / "report.md", text)
    return text
