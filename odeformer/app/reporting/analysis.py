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
from pathlib import Path
from typing import Any

import torch

from ... import atlas as atlas_module


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finite(value: Any) -> Any:
    """A value for JSON: ``inf`` as the string ``"inf"`` (JSON has no infinity), tuples as lists, recursively."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _interval(value: Any) -> str:
    return "unbounded" if isinstance(value, float) and math.isinf(value) else f"{value:.6g}"


def scheme_report(stepper: Any, label: str, out: Path) -> dict[str, Any]:
    """Analyse ``stepper`` (:func:`solvers.analysis.analyze`), draw its figures into ``out``, write ``report.md``;
    return the numbers."""
    from solvers import analysis

    numbers = analysis.analyze(stepper)
    out.mkdir(parents=True, exist_ok=True)
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
    axis.set_title(f"{label}: stability region (spectral radius ≤ 1)")
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "region.png", dpi=120)
    plt.close(figure)
    at_least = " (at least: every condition the engine derives holds)" if numbers.get("order_at_least") else ""
    lines = [f"# Analysis of {label}", "", f"Order {numbers['order']}{at_least}.", ""]
    figures = ["region.png"]
    if second:
        lines.append(f"- oscillator stability interval in ω·dt: {_interval(numbers['oscillator_stability_interval'])}")
        orders = numbers.get("dispersion_order"), numbers.get("dissipation_order")
        lines.append(f"- dispersion order: {orders[0]}; dissipation order: {orders[1]} (None: no error of that kind)")
        if numbers.get("dispersion_note"):
            lines.append(f"- {numbers['dispersion_note']}")
        top = numbers.get("oscillator_stability_interval") or 2.0
        top = min(top, 4.0) if math.isfinite(top) else 4.0
        samples = [top * k / 60 for k in range(1, 60)]
        try:
            measured = analysis.dispersion(stepper, samples)
        except ValueError:
            measured = None
        if measured is not None:
            figure, axis = plt.subplots(figsize=(5.5, 4))
            axis.semilogy(measured.omega_dt, [abs(v) + 1e-300 for v in measured.phase_error], label="|phase error|")
            axis.semilogy(
                measured.omega_dt, [abs(v) + 1e-300 for v in measured.amplitude_error], label="|amplitude error|"
            )
            axis.set_xlabel("ω dt")
            axis.set_ylabel("error per step")
            axis.set_title(f"{label}: dispersion and dissipation")
            axis.legend(fontsize=8)
            figure.tight_layout()
            figure.savefig(out / "dispersion.png", dpi=120)
            plt.close(figure)
            figures.append("dispersion.png")
    else:
        if numbers.get("stability_polynomial") is not None:
            shown = numbers.get("stability_polynomial_exact") or [f"{c:.6g}" for c in numbers["stability_polynomial"]]
            lines.append("- stability polynomial R(z), coefficients from z⁰ up: " + ", ".join(shown))
        lines.append(f"- real stability interval: {_interval(numbers['real_stability_interval'])}")
        lines.append(f"- imaginary stability interval: {_interval(numbers['imaginary_stability_interval'])}")
    if numbers.get("principal_error_norm") is not None:
        lines.append(f"- principal error norm: {numbers['principal_error_norm']:.6g}")
    lines += ["", *(f"![{f[:-4]}]({f})" for f in figures), ""]
    (out / "report.md").write_text("\n".join(lines))
    return numbers


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
    out.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    count = len(layers)
    columns = min(count, 4)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
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
    for axis in list(axes.flat)[count:]:
        axis.axis("off")
    figure.suptitle(f"{label}: measured spectrum over the scheme's region", fontsize=10)
    figure.tight_layout()
    figure.savefig(out / "atlas.png", dpi=110)
    plt.close(figure)
    index = [entry["layer"] for entry in layers]
    figure, axis = plt.subplots(figsize=(5.5, 3.5))
    axis.semilogy(index, [max(entry["headroom"], 1e-3) for entry in layers], marker="o")
    axis.axhline(1.0, color="#c0392b", lw=0.8, ls="--")
    axis.set_xlabel("layer")
    axis.set_ylabel("headroom (factor on dt)")
    axis.set_title(f"{label}: stability headroom per layer")
    figure.tight_layout()
    figure.savefig(out / "headroom.png", dpi=120)
    plt.close(figure)
    figure, axis = plt.subplots(figsize=(5.5, 3.5))
    axis.plot(index, [entry["predicted_contraction"] for entry in layers], marker="o", label="predicted (linearised)")
    axis.plot(index, [entry["measured_contraction"] for entry in layers], marker="s", label="measured (the layer)")
    axis.axhline(1.0, color="grey", lw=0.5)
    axis.set_xlabel("layer")
    axis.set_ylabel("Dirichlet energy ratio across the layer")
    axis.set_title(f"{label}: contraction of the mean-free part")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "contraction.png", dpi=120)
    plt.close(figure)
    return ["atlas.png", "headroom.png", "contraction.png"]


def refinement_plot(found: dict[str, Any], label: str, out: Path) -> str:
    """``refinement.png``: the logits' change against the finest ``k``; return its file name."""
    plt = pyplot()
    rows = [row for row in found["refinement"] if row["logit_change"] > 0]
    figure, axis = plt.subplots(figsize=(5.5, 3.5))
    axis.loglog([row["k"] for row in rows], [row["logit_change"] for row in rows], marker="o", label="logits")
    axis.loglog([row["k"] for row in rows], [row["hidden_change"] for row in rows], marker="s", label="last state")
    order = found.get("observed_order")
    axis.set_title(f"{label}: refinement (observed order {'–' if order is None else f'{order:.2f}'})")
    axis.set_xlabel("k (each layer's step as k steps of dt/k)")
    axis.set_ylabel("relative change vs the finest k")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "refinement.png", dpi=120)
    plt.close(figure)
    return "refinement.png"


def write_json(path: Path, numbers: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite(numbers), indent=2) + "\n")


def run_markdown(numbers: dict[str, Any], model: Any, out: Path, title: str | None = None) -> str:
    """The figures and ``report.md`` of a run's atlas (and refinement) into ``out``; return the Markdown."""
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
        order = numbers.get("observed_order")
        lines += ["", f"Observed order: {'–' if order is None else f'{order:.2f}'}.", "", numbers["verdict"]]
    lines += ["", *(f"![{f[:-4]}]({f})" for f in figures), ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text
