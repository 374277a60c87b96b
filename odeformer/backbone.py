"""The backbone: ``depth`` layers, each one step of its own ``dt``, then a final LayerNorm; and its one builder.

    x (B, N, D) -> [layer 1: one step of dt_1] -> ... -> [layer L] -> LN -> features (B, N, D)

:func:`transformer` builds every backbone: the layers (:class:`~odeformer.layer.Layer`, each with its fields, its
block stepper, its start time and its step), or a :class:`~odeformer.continuous.ContinuousBackbone` for a
continuous-depth solver. :class:`Backbone` runs the depth loop (:meth:`Backbone.forward`): the one loop of
:mod:`solvers`, :func:`solvers.run_steps`, which the property kit checks, over each layer's block stepper, its block
of fields and its own step; consecutive layers whose schemes are of one kind share the scheme's running state (a
two-step scheme's history, a cached force); a second-order layer starts its velocity at zero (``v0 = 0``, as in the
Wavy Transformer), and where a schedule switches between first- and second-order layers the velocity starts at zero
on entry and is dropped on exit (:func:`solvers.y_for`). Activation checkpointing recomputes each step in the
backward pass (:func:`solvers.checkpointed`); schedules whose backward pass rebuilds states by inverting the layers
run :func:`solvers.integrate_reversible`.

Two layouts: ``norm="pre"`` (the fields normalise their input, a final LayerNorm follows the loop) and
``norm="post"`` (a map — LayerNorm, with the chain rule on the velocity — follows each sublayer, and no final norm).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import Tensor, nn

import solvers
from solvers import PhaseState

from .continuous import ContinuousBackbone, ContinuousSolver
from .fields import AttentionField, FeedForward, JointIdentity, _forward_mode
from .hooks import direct_calls
from .joint import JointLayerNorm
from .knots import KnotField, knot_uses
from .layer import JointDropout, Layer, StateMap
from .parameterization import Parameterization, require_limit, scheme_roles
from .registry import Solver, as_solver

SolverSchedule = str | Solver | Sequence[str | Solver] | Callable[[int], str | Solver]
"""A solver (a name, a :class:`~odeformer.registry.Solver`, a stepper class, ``"module.Class"``) for every layer, a
sequence with one per layer, or ``layer_index -> solver``."""

NORMS = ("pre", "post")


def schedule(solver: SolverSchedule, depth: int) -> list[Solver]:
    """One :class:`~odeformer.registry.Solver` per layer from any accepted ``solver`` value."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}.")
    if isinstance(solver, (str, Solver, type, solvers.AbstractStepper)):  # an instance: as_solver says what to give
        chosen = [as_solver(solver)] * depth
    elif callable(solver):
        chosen = [as_solver(solver(i)) for i in range(depth)]
    else:
        chosen = [as_solver(s) for s in solver]
        if len(chosen) != depth:
            raise ValueError(f"a solver schedule needs one entry per layer: got {len(chosen)} for depth {depth}.")
    for entry in chosen:
        if not isinstance(entry, Solver):
            raise ValueError(f"{entry.name!r} is a continuous-depth solver: give it as the model's only solver.")
    return chosen


class Backbone(nn.Module):
    """A stack of :class:`~odeformer.layer.Layer` s integrated in depth, then ``norm``; see the module docstring.
    :func:`transformer` builds one: the layers come built, each with its own time and step, so nothing here reads
    ``dt`` or builds a field.

    ``checkpoint=True`` recomputes each layer in the backward pass instead of storing its activations. A backbone of
    ``memory="rebuild"`` layers (the ``reversible`` solver) stores only its final state when training and rebuilds
    the others by inverting the layers.
    """

    def __init__(
        self,
        layers: Sequence[Layer],
        norm: nn.Module | None = None,
        checkpoint: bool = False,
        parameterization: Parameterization | None = None,
    ):
        super().__init__()
        if not layers or not all(isinstance(layer, Layer) for layer in layers):
            raise ValueError("a Backbone needs at least one layer, each an odeformer.layer.Layer.")
        self.layers = nn.ModuleList(layers)
        self.norm = nn.Identity() if norm is None else norm
        self.checkpoint = checkpoint
        self.parameterization = parameterization or Parameterization("standard", len(layers))
        self.resolution: float = 1  # steps per layer step: k > 1 refines, 1/m coarsens (odeformer.atlas.resampled)
        self.integrator: Callable[[Backbone, Tensor, list], Any] | None = (
            None  # the limit flow (odeformer.atlas.solved)
        )
        self.observer: Callable[[int, Layer, Any, Any], None] | None = None  # sees each layer's input (the atlas)
        memory = {layer.solver.memory for layer in layers}
        if len(memory) > 1:
            raise ValueError(
                "a schedule cannot mix the reversible solver with others: its backward rebuilds every layer."
            )
        for i in range(1, len(layers)):  # the depth loop steps from the first layer's time by each layer's step
            previous, layer = layers[i - 1], layers[i]
            if layer.t0 != previous.t0 + previous.dt:
                raise ValueError(
                    f"layer {i} starts at t0={layer.t0:g}, but layer {i - 1} ends at {previous.t0 + previous.dt:g}: "
                    "each layer starts where the one before ends."
                )
        self.reversible = memory == {"rebuild"}
        if self.reversible:
            for i, layer in enumerate(self.layers):
                if not layer.claims().reversible:
                    raise ValueError(
                        f"layer {i} ({layer.block_stepper!r}) cannot be inverted, so the reversible backward cannot "
                        "rebuild through it; every sub-step must be reversible and no norm may follow a sublayer."
                    )
            if any(_drops(m) for m in self.layers.modules()):
                raise ValueError(
                    "the reversible solver needs dropout=0: its backward rebuilds states by inverting each "
                    "layer, which random dropout masks would break."
                )

    @property
    def second_order(self) -> bool:
        """Whether any layer carries a velocity."""
        return any(layer.second_order for layer in self.layers)

    def roles(self) -> dict[str, tuple[str, float]]:
        """``{parameter name: (role, uses)}`` for every parameter of the backbone (its own names, as in
        ``named_parameters``): the role :mod:`odeformer.parameterization` gives it and how many steps it acts in. A
        field's matrices are ``hidden``, its LayerNorms' gains and biases ``field_norm``, its other vectors
        ``hidden_bias``, acting in 1 step (a layer's own), in every step its layers share it in (tied), or, for a
        knot, the sum of its interpolation weights over the layers' start times; a stepper's parameters are
        ``scheme`` or ``discretisation`` (:func:`~odeformer.parameterization.scheme_roles`); the final norm and a
        post-norm map are ``outer_norm``."""
        found: dict[str, tuple[str, float]] = {}
        steps: dict[int, float] = {}  # id(field module) -> how many steps it acts in
        times = [layer.t0 for layer in self.layers]
        for layer in self.layers:
            for field in (layer.attention, layer.ffn):
                if isinstance(field, KnotField):
                    for knot, uses in zip(field.knots, knot_uses(field, times)):
                        steps[id(knot)] = uses
                elif field is not None:
                    steps[id(field)] = steps.get(id(field), 0.0) + 1.0
        modules = dict(self.named_modules())
        for prefix, module in modules.items():
            if id(module) not in steps:
                continue
            for sub, inner in module.named_modules(prefix=prefix):
                normed = isinstance(inner, (nn.LayerNorm, JointLayerNorm))
                for name, p in inner.named_parameters(prefix=sub, recurse=False):
                    role = "field_norm" if normed else ("hidden" if p.dim() >= 2 else "hidden_bias")
                    found.setdefault(name, (role, steps[id(module)]))
        for i, layer in enumerate(self.layers):
            for name, role in scheme_roles(layer.stepper).items():
                found[f"layers.{i}.block_stepper.stepper.{name}"] = (role, 1.0)
        for name, _ in self.named_parameters():
            found.setdefault(name, ("outer_norm", 1.0))  # the final norm, a post-norm map, an FFN sub-step's own
        return found

    def forward(self, x: Tensor, record: list | None = None, cache: Any = None, **context: Any) -> Tensor:
        """Features ``(B, N, D)``. ``context`` (e.g. ``attn_mask``) goes to every attention field. If ``record`` is a
        list, the state after every layer is appended to it (the input first): a Tensor, or a ``PhaseState`` for
        second-order layers. With a :class:`~odeformer.generate.KVCache` (causal attention), ``x`` holds new
        positions only, after those the cache holds: each layer's attention reads and extends its own slots."""
        layers = self.layers
        if cache is not None and cache.bound is not None and not context and record is None:
            y = self._bound_pass(x, cache)
            if y is not None:
                return y
        if cache is None:
            contexts = [context] * len(layers)
        else:
            if len(cache.layers) != len(layers):
                raise ValueError(f"the cache has {len(cache.layers)} layers, the backbone {len(layers)}.")
            cache.begin(x.shape[1])
            contexts = [{**context, "cache": c} for c in cache.layers]
        fields = [layer.block(c) for layer, c in zip(layers, contexts)]
        plain = self.resolution == 1 and self.observer is None
        if self.integrator is not None:  # the ODE the layers discretise, by an adaptive solver (an analysis's)
            y = self.integrator(self, x, fields)
            if record is not None:
                record.extend([x, y])
        elif self.reversible and plain and record is None and cache is None and torch.is_grad_enabled():
            y = self._rebuilding(x, fields)
        else:
            if self.observer is not None:
                hook = self._observed(contexts)
            elif self.resolution != 1:
                hook = None
            elif self.checkpoint and torch.is_grad_enabled() and cache is None:
                hook = solvers.checkpointed([layers])
            else:
                hook = None
            y = self._steps(x, fields, hook, record)
            if cache is not None:
                cache.end()
        return self.norm(y.x if isinstance(y, PhaseState) else y)

    def _steps(self, x: Tensor, fields: list, hook: solvers.Hook | None = None, record: list | None = None) -> Any:
        """The depth loop: :func:`solvers.run_steps` over the layers' block steppers, fields and steps (each checked
        when its layer was built) from the first layer's time (``x`` as the first layer takes it,
        :func:`solvers.y_for`), at the backbone's :attr:`resolution` (:meth:`schedule`); the last state, and every
        step's state in ``record`` (the input first) if it is a list."""
        _, steppers, fields, dts = self.schedule(fields)
        states = solvers.run_steps(steppers, fields, solvers.y_for(steppers[0], x), dts, self.layers[0].t0, hook)
        if record is None:
            return deque(states, maxlen=1)[0]  # keeps only the last state alive
        record.append(x)
        record.extend(states)
        return record[-1]

    def schedule(self, fields: list) -> tuple[list[int], list, list, list[float]]:
        """``(origins, steppers, fields, dts)``, one entry per step at the backbone's :attr:`resolution` ``k``: the
        layer each step comes from, its block stepper, its block (from ``fields``, one per layer) and its size. ``k =
        1``: the layers as built; a whole ``k > 1``: each layer's step as ``k`` steps of ``dt / k`` with its weights
        (and a weight-as-time model's fields at each step's own time); ``k = 1/m``: every ``m``-th layer, stepping
        over the ``m`` layers' span (``m`` must divide the depth)."""
        layers, k = self.layers, self.resolution
        if k >= 1:
            parts = int(k)
            origins = [i for i in range(len(layers)) for _ in range(parts)]
            dts = [layers[i].dt / parts for i in origins]
        else:
            m = round(1 / k)
            origins = list(range(0, len(layers), m))
            dts = [sum(layer.dt for layer in layers[i : i + m]) for i in origins]
        return origins, [layers[i].block_stepper for i in origins], [fields[i] for i in origins], dts

    def _bound_pass(self, x: Tensor, cache: Any) -> Tensor | None:
        """A pass with a binding cache (``new_cache(..., bind=True)``, what ``generate`` makes): the layers step on
        blocks whose fields' weights were read on the cache's first pass (:meth:`Layer.bind_cache`), the depth loop
        of :meth:`forward` without its per-layer module calls. ``None`` (the module calls run instead) where those
        would not do the same: autograd or forward-mode AD on, a hook or training mode on a module left out
        (:func:`~odeformer.hooks.direct_calls`), another resolution or an observer."""
        if torch.is_grad_enabled() or _forward_mode() or self.resolution != 1 or self.observer or self.integrator:
            return None
        binding = cache.bound.get(self)
        if binding is None:
            binding = cache.bound[self] = self._bind(cache)
        blocks, norm, direct = binding
        if not direct():
            return None
        cache.begin(x.shape[1])
        y = self._steps(x, blocks)
        cache.end()
        return norm(y.x if isinstance(y, PhaseState) else y)

    def _bind(self, cache: Any) -> tuple[list, Callable[[Tensor], Tensor], Callable[[], bool]]:
        """Each layer's block bound to its cache (its fields' weights read once); the final norm (a LayerNorm's
        weights bound); and the check that these may stand for the modules they leave out
        (:func:`~odeformer.hooks.direct_calls`)."""
        layers = self.layers
        if len(cache.layers) != len(layers):
            raise ValueError(f"the cache has {len(cache.layers)} layers, the backbone {len(layers)}.")
        blocks, modules = [], []
        for layer, layer_cache in zip(layers, cache.layers):
            block, bypassed = layer.bind_cache(layer_cache)
            blocks.append(block)
            modules += bypassed
        norm = self.norm
        if type(norm) is nn.LayerNorm:
            shape, weight, bias, eps = norm.normalized_shape, norm.weight, norm.bias, norm.eps
            modules.append(norm)
            norm = partial(F.layer_norm, normalized_shape=shape, weight=weight, bias=bias, eps=eps)
        return blocks, norm, direct_calls(modules)

    def _observed(self, contexts: list[dict[str, Any]]) -> solvers.Hook:
        """The hook that shows the observer each layer's input and context, at the first of that layer's steps."""
        origins = self.schedule(contexts)[0]
        index = iter(range(len(origins)))

        def hook(stepper: Any, field: Any, t: Any, y: Any, dt: Any, state: Any) -> tuple[Any, Any]:
            j = next(index)
            i = origins[j]
            if j == 0 or origins[j - 1] != i:
                self.observer(i, self.layers[i], y, contexts[i])
            return stepper.step(field, t, y, dt, state)

        return hook

    def _rebuilding(self, x: Tensor, fields: list) -> Any:
        """The reversible schedule's forward, whose backward rebuilds each layer's input by inverting it."""
        layers = self.layers
        if self.training and any(_drops(m) for m in layers.modules()):
            raise ValueError(
                "the reversible solver needs dropout=0 (it was switched on after construction): its backward "
                "rebuilds states by inverting each layer, which random dropout masks would break."
            )
        steppers = [layer.block_stepper for layer in layers]
        return solvers.integrate_reversible(
            steppers, fields, solvers.y_for(steppers[0], x), [layer.dt for layer in layers], layers[0].t0,
            modules=[layers],
        )  # fmt: skip


def _maps(
    p: Solver, has_ffn: bool, make_norm: Callable[[], nn.Module] | None, shared: dict[str, nn.Module] | None
) -> tuple[nn.Module | None, nn.Module | None]:
    """A post-norm layer's maps ``(after_attention, after_ffn)``: one after each sublayer, but one after the whole step
    for a whole-block layer (its FFN inside the step). ``shared`` (tied weights) holds one map per role, built where a
    layer first needs it, so a tied layer has the maps its untied twin has."""
    if make_norm is None:
        return None, None
    whole = p.block_stepper is solvers.Whole and has_ffn
    maps = []
    for role, needed in (("after_attention", not whole), ("after_ffn", has_ffn)):
        if not needed:
            maps.append(None)
        elif shared is None:
            maps.append(StateMap(make_norm()))
        else:
            if role not in shared:
                shared[role] = StateMap(make_norm())
            maps.append(shared[role])
    return maps[0], maps[1]


def _drops(module: nn.Module) -> bool:
    """Whether ``module`` drops out at a positive rate (``nn.Dropout``, a joint dropout, or a ``dropout`` attribute)."""
    rate = module.p if isinstance(module, (nn.Dropout, JointDropout)) else getattr(module, "dropout", 0.0)
    return isinstance(rate, (int, float)) and rate > 0


@dataclass(frozen=True)
class Fields:
    """One layer's fields, where they are not :func:`transformer`'s standard ones (``transformer(..., fields=...)``).

    ``attention(form)`` and ``ffn()`` build one layer's fields (``ffn=None``: attention only, as in DIFFormer);
    ``maps()`` (post-norm layouts) builds the map that follows each sublayer, a joint module with ``position(x)`` and
    ``forward(x, v)``; ``final_norm`` puts a LayerNorm (epsilon ``norm_eps``) after the last layer.
    """

    attention: Callable[[str], nn.Module]
    ffn: Callable[[], nn.Module] | None = None
    maps: Callable[[], nn.Module] | None = None
    final_norm: bool = True
    norm_eps: float = 1e-5


def _standard_fields(
    dim: int,
    heads: int,
    mask: str,
    impl: str,
    mlp_ratio: float,
    activation: str,
    ln_mode: str,
    dropout: float,
    norm: str,
    norm_eps: float | None,
    qkv_bias: bool,
    mlp_hidden: int | None,
) -> Fields:
    """Softmax attention and the FFN, in the pre- or post-norm layout (see :func:`transformer`)."""
    if not isinstance(dim, int) or not isinstance(heads, int) or heads < 1 or dim % heads:
        raise ValueError(f"dim must be divisible by heads: got dim={dim}, heads={heads}.")
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}; got {norm!r}.")
    eps, ffn_eps = (1e-5, 1e-6) if norm_eps is None else (norm_eps, norm_eps)
    joint_norm = partial(JointLayerNorm, mode=ln_mode, eps=ffn_eps)
    post = norm == "post"
    attention = partial(
        AttentionField,
        dim,
        heads,
        mask=mask,
        impl=impl,
        dropout=dropout,
        qkv_bias=qkv_bias,
        norm_layer=nn.Identity if post else partial(nn.LayerNorm, eps=eps),
    )
    hidden = int(mlp_ratio * dim) if mlp_hidden is None else mlp_hidden
    ffn = partial(FeedForward, dim, hidden, activation, ln_mode, dropout, JointIdentity if post else joint_norm)
    return Fields(attention, ffn, partial(joint_norm, dim) if post else None, final_norm=not post, norm_eps=eps)


def transformer(
    depth: int,
    dim: int,
    heads: int,
    solver: SolverSchedule | ContinuousSolver,
    dt: float | None = None,
    mask: str = "full",
    impl: str = "auto",
    mlp_ratio: float = 4.0,
    activation: str = "gelu",
    ln_mode: str = "paper",
    dropout: float = 0.0,
    tie_weights: bool = False,
    checkpoint: bool = False,
    norm: str = "pre",
    norm_eps: float | None = None,
    qkv_bias: bool = True,
    mlp_hidden: int | None = None,
    parameterization: str = "standard",
    time: float | None = None,
    knots: int | None = None,
    *,
    form: str | None = None,
    fields: Fields | None = None,
) -> nn.Module:
    """The one builder of a backbone: a :class:`Backbone` of ``depth`` layers, or a
    :class:`~odeformer.continuous.ContinuousBackbone` (one weight-tied block) when ``solver`` is a
    :class:`~odeformer.continuous.ContinuousSolver`.

    The fields are softmax attention (:class:`~odeformer.fields.AttentionField`, ``heads`` heads, ``mask``, ``impl``,
    ``qkv_bias``, attention ``dropout``) and an FFN (hidden width ``mlp_hidden``, or ``int(mlp_ratio * dim)``;
    ``activation``; ``ln_mode`` for the velocity through its LayerNorm), unless ``fields`` (a :class:`Fields`, e.g.
    a graph's attention and no FFN) replaces them (setting one of those options beside it is an error).
    ``norm="pre"``: each field normalises its input (``Attn(LN x)``, ``MLP(LN x)``) and a LayerNorm follows the last
    layer; ``norm="post"``: the fields read the state as it is (``Attn(x)``, ``MLP(x)``) and a joint LayerNorm follows
    every sublayer, as in BERT. ``norm_eps`` sets every LayerNorm's epsilon (``None``: 1e-5, and 1e-6 for the FFN's
    joint LayerNorm).

    ``dt=None`` takes each solver's default step (a number replaces every layer's; the layer checks it, once),
    ``form=None`` each solver's attention form; ``tie_weights=True`` builds
    the fields once and shares them across depth, and each map once per role (after the attention, after the FFN),
    so each layer has the maps it has untied; ``checkpoint`` as in :class:`Backbone`.

    ``parameterization="ode"`` makes the layers steps of one flow over depth-time ``[0, time]``: each takes ``dt =
    time / depth`` (``time=None``: :data:`DEFAULT_SPAN` of the solvers' default steps), and the optimiser settings
    follow :mod:`odeformer.parameterization` (:meth:`Backbone.roles`); a layer with no small-step limit (order 0) is
    refused. ``knots=K`` makes each field's weights a piecewise-linear function of depth-time given at ``K`` knots
    (:class:`~odeformer.knots.KnotField`, shared by every layer): ``K = 1`` is a weight-tied model, ``K = depth``
    has a knot at every layer's start.
    """
    if isinstance(solver, str) and isinstance(as_solver(solver), ContinuousSolver):
        solver = as_solver(solver)  # a continuous-depth solver by its name
    standard = (mask, impl, mlp_ratio, activation, ln_mode, dropout, norm, norm_eps, qkv_bias, mlp_hidden)
    if fields is not None:
        given = [k for k, v, default in zip(_STANDARD_OPTIONS, standard, _STANDARD_DEFAULTS) if v != default]
        if given:
            raise ValueError(
                f"transformer: fields= replaces the standard fields, so {', '.join(given)} would be ignored; set "
                "them in your Fields, or leave out fields= to use the standard ones."
            )
    else:
        fields = _standard_fields(dim, heads, *standard)
        if norm == "post" and isinstance(solver, ContinuousSolver):
            raise ValueError(
                "norm='post' applies a LayerNorm after each layer's sublayers; continuous solvers have none."
            )
    if isinstance(solver, ContinuousSolver):
        if parameterization != "standard" or time is not None or knots is not None:
            raise ValueError(
                f"a continuous-depth solver is already one flow over [0, T] (solver.T={solver.T:g}); "
                "parameterization, time and knots apply to models of discrete layers."
            )
        return ContinuousBackbone(depth, dim, solver, fields.attention, fields.ffn, form=form)
    specs = schedule(solver, depth)
    if (tie_weights or knots is not None) and len({p.form if form is None else form for p in specs}) > 1:
        raise ValueError(
            "tie_weights and knots share one attention field, whose form is fixed, but the schedule mixes the "
            "residual and laplacian forms; give every layer one form: odeformer.solver(name, form='laplacian') in "
            "the schedule."
        )
    rules = _rules(parameterization, time, depth, dt, specs)
    if rules.kind == "ode":
        dt = rules.dt
    shared_fields = _knot_fields(knots, depth, dt, specs, form, fields, tie_weights) if knots is not None else None
    layers: list[Layer] = []
    shared: dict[str, nn.Module] = {}  # tied: one map per role, built where a layer first needs it
    t = 0.0  # each layer's start time: the steps before it
    for p in specs:
        if shared_fields is not None:  # one field per sublayer, its weights a function of time
            attention, ffn = shared_fields
        elif tie_weights and layers:  # one set of fields for every layer, each with its own stepper
            attention, ffn = layers[0].attention, layers[0].ffn
        else:
            attention = fields.attention(p.form if form is None else form)
            ffn = None if fields.ffn is None else fields.ffn()
        maps = _maps(p, ffn is not None, fields.maps, shared if tie_weights else None)
        layers.append(Layer(p, dim, attention, ffn, *maps, dt=dt, t0=t))  # the model's dt, else the solver's
        t += layers[-1].dt
        if rules.kind == "ode":
            require_limit(rules, layers[-1].claims().order, p.name or p.stepper.__name__)
    norm_layer = nn.LayerNorm(dim, eps=fields.norm_eps) if fields.final_norm else None
    return Backbone(layers, norm_layer, checkpoint=checkpoint, parameterization=rules)


DEFAULT_SPAN = 4
"""``parameterization="ode"`` with no ``time``: the flow covers this many of the solvers' default steps (``T = 2`` for
Full Wave's ½, ``4`` for diffusion's 1), the span of the experiments' four standard layers, whatever the depth."""


def _rules(kind: str, time: float | None, depth: int, dt: float | None, specs: list[Solver]) -> Parameterization:
    """The model's :class:`~odeformer.parameterization.Parameterization`, or a one-line error: ``dt`` and ``ode`` (whose
    step is ``time / depth``), ``time`` under ``standard``."""
    if kind == "ode":
        if dt is not None:
            raise ValueError(
                f"under parameterization=ode every layer's step is time / depth; leave dt ({dt!r}) unset and give "
                "time (the depth-time the layers cover) instead."
            )
        if time is None:
            time = DEFAULT_SPAN * sum(p.dt for p in specs) / depth
    return Parameterization(kind, depth, time)


def _knot_fields(
    knots: Any, depth: int, dt: float | None, specs: list[Solver], form: str | None, fields: Fields, tied: bool
) -> tuple[KnotField, KnotField | None]:
    """The attention and FFN fields of a model whose weights are functions of time, given at ``knots`` knots over
    the layers' span (built knot by knot, attention then FFN, as untied layers are: ``knots = depth`` starts from
    the untied model's weights)."""
    if isinstance(knots, bool) or not isinstance(knots, int) or not 1 <= knots <= depth:
        raise ValueError(f"knots must be a whole number from 1 to depth ({depth}), got {knots!r}.")
    if tied:
        raise ValueError("knots make the weights a function of time; tie_weights makes them constant: choose one.")
    if fields.maps is not None:
        raise ValueError(
            "knots make the fields functions of time, but a map after each sublayer (norm='post') has no time; use "
            "norm='pre' with knots."
        )
    span = sum(p.dt if dt is None else dt for p in specs)
    attention, ffn = [], []
    for _ in range(knots):
        attention.append(fields.attention(specs[0].form if form is None else form))
        if fields.ffn is not None:
            ffn.append(fields.ffn())
    return KnotField(attention, span), (KnotField(ffn, span) if ffn else None)


_STANDARD_OPTIONS = ("mask", "impl", "mlp_ratio", "activation", "ln_mode", "dropout", "norm", "norm_eps", "qkv_bias",
                     "mlp_hidden")  # fmt: skip
_STANDARD_DEFAULTS = tuple(inspect.signature(transformer).parameters[k].default for k in _STANDARD_OPTIONS)
"""What the standard fields are built from, with defaults: ``fields=`` replaces them, so none may be set beside it."""
