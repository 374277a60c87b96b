"""Figures of over-smoothing and depth dynamics, layer by layer: PNGs with the numbers beside them.

For every measure of :mod:`odeformer.diagnostics`, :func:`diagnose` writes ``<measure>.png`` (the measure against the
layer index, 0 = input, one curve per run) and ``<measure>.json``: the measure's name, title, definition (a sentence
with the formula), units, axis, y scale and per run its layers and values. ``dirichlet`` is the raw energy, which
grows with the token norms; ``dirichlet_normalised`` divides it by the mean squared token norm (scale-free, in
[0, 2]). ``wave_energy`` uses the difference quotient ``(x_l - x_{l-1})/dt`` as velocity for every run (dashed for
runs that carry none). For runs whose layers carry a velocity, ``phase.png``/``phase.json``: the x–v path of
channels 0–3 of token 0 of the first item (an image's [CLS] token) through the layers. The batch is the first
``size`` items of the validation split (the whole graph for node classification).

It takes built models and their data; ``odeformer-diagnose`` (:mod:`odeformer.app.commands.diagnose`) and the
reproduction sweep load them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ...data import TaskData
from ...diagnostics import layer_measures
from ...tasks import task_of
from .. import files
from .analysis import finite
from .plots import pyplot


class Measure(NamedTuple):
    """How one measure is plotted and described in its JSON file."""

    title: str  # the plot's title: what the curve is, in words and symbols
    ylabel: str
    definition: str  # one sentence with the formula
    units: str
    log: bool  # log y axis (when every value is positive and they span at least a factor of 2)
    per_layer: bool  # one value per layer l = 1..L (else one per state l = 0..L)


STATE_AXIS = (
    "layer index l = 0..L: 0 = the input to the first layer (the embedded tokens), l = the state after layer l "
    "(a continuous-depth run: its l-th of L evenly spaced recorded times)"
)
LAYER_AXIS = "layer index l = 1..L: layer l, from its input state x_{l-1} (index 0, the input, has no value)"
SQUARED = "(token-state units)²: scales as c² when every token is multiplied by c"
DESCRIPTIONS: dict[str, Measure] = {
    "cosine": Measure(
        "mean pairwise token cosine similarity",
        "mean cos(x_j, x_k), j ≠ k",
        "cosine(X) = (1/(N(N−1))) Σ_{j≠k} x_j·x_k / (‖x_j‖ ‖x_k‖), the mean over ordered pairs of distinct tokens "
        "(an image's [CLS] token left out): 1 when all tokens point the same way.",
        "dimensionless",
        False,
        False,
    ),
    "dirichlet": Measure(
        "raw Dirichlet energy E(X), complete graph\n(scale-dependent: grows with the token norms; "
        "see dirichlet_normalised)",
        "E(X) = (1/N²) Σ_jk ‖x_j − x_k‖²",
        "E(X) = (1/N²) Σ_{j,k} ‖x_j − x_k‖² over all ordered pairs of the N tokens; it scales as c² when X -> cX, so "
        "it rises with the token norms even while the tokens' directions collapse (dirichlet_normalised removes "
        "the scale).",
        SQUARED,
        True,
        False,
    ),
    "dirichlet_normalised": Measure(
        "scale-free Dirichlet energy E(X) / mean_i ‖x_i‖², complete graph\n(0 iff all tokens are equal; at most 2)",
        "E(X) / ((1/N) Σ_i ‖x_i‖²)",
        "Ẽ(X) = E(X) / ((1/N) Σ_i ‖x_i‖²) with E(X) = (1/N²) Σ_{j,k} ‖x_j − x_k‖²: invariant to X -> cX (c ≠ 0), "
        "0 iff all tokens are equal, at most 2 (2 exactly when the mean token is 0), and equal to 2·rank_collapse²; "
        "over-smoothing drives it to 0.",
        "dimensionless",
        True,
        False,
    ),
    "feature_variance": Measure(
        "feature variance across tokens, mean over channels",
        "(1/D) Σ_c Var_i(x_ic)",
        "Var(X) = (1/D) Σ_c (1/N) Σ_i (x_ic − mean_i x_ic)²: the (population) variance of each of the D channels "
        "across the N tokens (nodes), averaged over channels; it equals E(X) / (2D), so it scales like the raw "
        "energy.",
        SQUARED,
        True,
        False,
    ),
    "rank_collapse": Measure(
        "rank collapse ‖X − 1 x̄ᵀ‖_F / ‖X‖_F (0: every token equals the mean token x̄)",
        "‖X − 1 x̄ᵀ‖_F / ‖X‖_F",
        "r(X) = ‖X − 1 x̄ᵀ‖_F / ‖X‖_F with x̄ the mean token: the share of the state's norm not carried by the mean "
        "token; 0 when every token equals the mean token.",
        "dimensionless",
        False,
        False,
    ),
    "spectral_gap": Measure(
        "attention spectral gap 1 − |λ₂(A)| (heads averaged)",
        "1 − |λ₂(A)|",
        "gap = 1 − |λ₂(A)|, λ₂ the eigenvalue of second-largest modulus of layer l's row-stochastic attention A "
        "(per head, then averaged) at its input x_{l-1}: how fast diffusion by A mixes; 0 means some direction is "
        "never smoothed.",
        "dimensionless",
        False,
        True,
    ),
    "wave_energy": Measure(
        "wave energy per token, layer l−1 → l: ½‖Δx/dt‖² + ¼ Σ_k A_jk ‖x_j − x_k‖²\n"
        "velocity = the difference quotient Δx/dt = $(x_l - x_{l-1})/dt$ for every run (first-order runs carry none)",
        "energy per token",
        "W_l = (1/N) [½ Σ_j ‖(x_{l,j} − x_{l-1,j}) / dt‖² + ¼ Σ_{j,k} A_jk ‖x_{l-1,j} − x_{l-1,k}‖²], A layer l's "
        "attention at x_{l-1} (heads averaged): the kinetic energy of the layer-to-layer difference quotient plus "
        "the attention-weighted potential whose gradient is the wave force (A − I)X. The difference quotient is the "
        "velocity for every run: a first-order run carries no velocity of its own, and a second-order run's carried "
        "velocity (phase.json) is not used.",
        "(token-state units)² (dt is a pure number)",
        True,
        True,
    ),
    "graph_dirichlet": Measure(
        "raw Dirichlet energy, input graph (scale-dependent)",
        "(1/N) Σ_(j,k)∈E ‖x_j − x_k‖²",
        "E_G(X) = (1/N) Σ_{(j,k) ∈ E} ‖x_j − x_k‖² over the input graph's directed edges (each undirected edge "
        "counted both ways); it scales as c² when X -> cX.",
        SQUARED,
        True,
        False,
    ),
    "graph_dirichlet_normalised": Measure(
        "scale-free Dirichlet energy, input graph: Σ_E ‖x_j − x_k‖² / Σ_i ‖x_i‖²",
        "Σ_(j,k)∈E ‖x_j − x_k‖² / Σ_i ‖x_i‖²",
        "E_G(X) / ((1/N) Σ_i ‖x_i‖²) = Σ_{(j,k) ∈ E} ‖x_j − x_k‖² / Σ_i ‖x_i‖² over the input graph's directed "
        "edges: invariant to X -> cX, 0 iff the tokens agree along every edge, at most 2·max_i (out-degree + "
        "in-degree).",
        "dimensionless",
        True,
        False,
    ),
}
PLOTTED = tuple(DESCRIPTIONS)
TITLES = {name: measure.title for name, measure in DESCRIPTIONS.items()}


def batch_of(data: TaskData, model: torch.nn.Module, size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(inputs, options)`` for :func:`layer_measures` from the validation split: the model's registered
    diagnostic batch (:class:`odeformer.tasks.TaskSpec`)."""
    return task_of(model).diagnostic_batch(data, model, size)


def diagnose(runs: list[tuple[str, TaskData, torch.nn.Module]], out: Path, size: int) -> list[str]:
    """Measure every run, write the PNGs and JSON files into ``out`` (never through a link:
    :mod:`odeformer.app.files`); return the names of the files written.

    Each ``<measure>.json`` holds ``measure``, ``title``, ``definition``, ``units``, ``axis``, ``y_scale``,
    ``batch`` and ``runs: {label: {"layers": [...], "values": [...]}}`` (``wave_energy.json`` also says, per run,
    whether it carries a velocity); ``phase.json`` names the token and channels it follows.
    """
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    files.folder(out)
    results, first_tokens, written = {}, {}, []
    for label, data, model in runs:
        inputs, options = batch_of(data, model, size)
        results[label], first_tokens[label] = layer_measures(model, *inputs, **options), task_of(model).first_token
    batch = f"each value is the mean over the first {size} validation items (node classification: the whole graph)"
    for measure in PLOTTED:
        spec = DESCRIPTIONS[measure]
        curves = {}
        for label, r in results.items():
            if measure in r:
                start = 1 if spec.per_layer else 0
                curves[label] = {"layers": list(range(start, start + len(r[measure]))), "values": r[measure]}
        if not curves:
            continue
        values = [v for curve in curves.values() for v in curve["values"]]
        log = spec.log and min(values) > 0 and max(values) >= 2 * min(values)  # within a factor 2: linear reads best
        fig, ax = plt.subplots(figsize=(7, 4.6))
        for label, curve in curves.items():
            style = {}
            if measure == "wave_energy":
                second = results[label]["second_order"]
                curve["carries_velocity"] = second
                curve["velocity"] = (
                    "difference quotient (x_l − x_{l-1})/dt; the run's carried velocity is not used"
                    if second
                    else "difference quotient (x_l − x_{l-1})/dt; a first-order run carries no velocity"
                )
                label += "" if second else " (first-order: v = Δx/dt)"
                style = {} if second else {"linestyle": "--"}
            ax.plot(curve["layers"], curve["values"], marker="o", ms=3, label=label, **style)
        axis = LAYER_AXIS if spec.per_layer else STATE_AXIS
        ax.set_title(spec.title, fontsize=9)
        ax.set_xlabel(
            "layer index l (layer l, from its input $x_{l-1}$)" if spec.per_layer else "layer index l (0 = input)"
        )
        ax.set_ylabel(f"{spec.ylabel}  [{'dimensionless' if spec.units == 'dimensionless' else '(units of x)²'}]")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if log:
            ax.set_yscale("log")
            _readable_log_ticks(ax.yaxis, min(values), max(values))
        ax.legend(fontsize=8)
        fig.tight_layout()
        files.write_figure(out / f"{measure}.png", fig)
        record = {
            "measure": measure,
            "title": " ".join(spec.title.split()),
            "definition": spec.definition,
            "units": spec.units,
            "axis": axis,
            "y_scale": "log" if log else "linear",
            "batch": batch,
        }
        if measure == "wave_energy":
            record["velocity"] = (
                "the difference quotient (x_l − x_{l-1})/dt for every run; runs without a carried velocity "
                "(first-order) are plotted too, dashed, with that quotient as their velocity"
            )
        record["runs"] = curves
        files.write_text(out / f"{measure}.json", _json(record))
        written += [f"{measure}.png", f"{measure}.json"]
    phases = {label: r for label, r in results.items() if "phase" in r}
    if phases:
        _phase_portraits(plt, phases, first_tokens, out)
        written += ["phase.png", "phase.json"]
    return written


def _readable_log_ticks(axis: Any, low: float, high: float) -> None:
    """Labels at major ticks only: 1, 1.5, 2, 3, .., 9 × 10^k when the values span less than a factor of 10, 1, 2, 5 ×
    10^k up to a factor of 1000, else powers of ten; plain numbers between 0.001 and 10⁵, else m×10^k; minor ticks
    unlabelled. (Values within a factor of 2 are drawn on a linear axis instead.)"""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    span = high / low
    subs = (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9) if span < 10 else (1, 2, 5) if span < 1000 else (1,)
    axis.set_major_locator(LogLocator(base=10, subs=[float(k) for k in subs]))
    axis.set_major_formatter(FuncFormatter(lambda value, _: _tick_label(value)))
    axis.set_minor_locator(LogLocator(base=10, subs=[float(k) for k in range(2, 10)]))
    axis.set_minor_formatter(NullFormatter())


def _tick_label(value: float) -> str:
    """``0.02``, ``5``, ``3000`` as plain numbers; ``10⁻⁶``-sized or ``10⁶``-sized values as ``m×10^k``."""
    if value <= 0 or 1e-3 <= value < 1e5:
        return f"{value:g}"
    exponent = math.floor(math.log10(value) + 1e-9)
    mantissa = round(value / 10**exponent, 6)
    return f"$10^{{{exponent}}}$" if mantissa == 1 else f"${mantissa:g}\\times 10^{{{exponent}}}$"


def _phase_portraits(plt: Any, phases: dict[str, dict[str, Any]], first_tokens: dict[str, str], out: Path) -> None:
    """``phase.png``: per run, the (x, v) path through the layers of one token in a few channels; ``phase.json``."""
    fig, axes = plt.subplots(1, len(phases), figsize=(5.5 * len(phases), 4.6), squeeze=False)
    runs = {}
    for ax, (label, r) in zip(axes[0], phases.items()):
        token, channels = r["phase_token"], r["phase_channels"]
        which = f"sample {token['sample']}, token {token['token']} ({first_tokens[label]})"
        layers = [layer for layer, p in enumerate(r["phase"]) if p is not None]
        points = [r["phase"][layer] for layer in layers]
        for i, channel in enumerate(channels):
            xs, vs = [p["x"][i] for p in points], [p["v"][i] for p in points]
            (line,) = ax.plot(xs, vs, marker="o", ms=3, label=f"channel {channel}")
            ax.annotate(f"l={layers[0]}", (xs[0], vs[0]), fontsize=7, color=line.get_color())
            ax.annotate(f"l={layers[-1]}", (xs[-1], vs[-1]), fontsize=7, color=line.get_color())
        ax.set_title(f"{label}\n{which}: x–v, layers {layers[0]}–{layers[-1]}", fontsize=9)
        ax.set(xlabel="x (state), channel c", ylabel="v (carried velocity), channel c")
        ax.legend(fontsize=8, title=f"token {token['token']}, channel c", title_fontsize=8)
        runs[label] = {
            "token": {**token, "description": which},
            "channels": channels,
            "layers": layers,
            "x": [p["x"] for p in points],
            "v": [p["v"] for p in points],
        }
    fig.tight_layout()
    files.write_figure(out / "phase.png", fig)
    first = next(iter(runs.values()))
    record = {
        "measure": "phase",
        "title": "phase portrait: the state x against the velocity v the layers carry, for one token",
        "definition": (
            "For each layer l, x_l[s, t, c] and v_l[s, t, c] of sample s and token t in channels c, where v is the "
            "velocity a second-order run carries (mapped through LayerNorm and the FFN by the chain rule); "
            "x[i] and v[i] list the channels at layers[i]."
        ),
        "units": "x: token-state units; v: token-state units per unit of depth time",
        "axis": "layer index l = 1..L (the input, l = 0, starts at v = 0 and is left out); each curve follows one "
        "channel through the layers",
        "runs": runs,
    }
    if all(run["token"] == first["token"] and run["channels"] == first["channels"] for run in runs.values()):
        record = {**record, "token": first["token"], "channels": first["channels"]}  # the same in every run
    files.write_text(out / "phase.json", _json(record))


def _json(record: dict) -> str:
    """Strict JSON: a value that is not finite (a run whose states blew up) is written as null."""
    return json.dumps(finite(record, spelled=False), indent=1, ensure_ascii=False, allow_nan=False) + "\n"


DIAGNOSED = ("cosine", "dirichlet_normalised", "feature_variance", "spectral_gap", "rank_collapse", "dirichlet")
"""The measures whose figures a results section links, in that order."""
