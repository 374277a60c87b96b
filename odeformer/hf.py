"""Hugging Face ``transformers`` models as odeformer models: the same weights, any integrator.

    hf = ViTForImageClassification.from_pretrained(path)
    model = odeformer.from_hf(hf, solver="full_wave")

:func:`from_hf` reads the model's config, builds the odeformer task model of the same shape, and copies every weight
into it. With ``solver="diffusion"`` (``dt = 1``) the copy computes the original's function (tested to ~1e-10 in
float64 over random configurations); any other preset integrates the same modules with another scheme, so a
pretrained checkpoint can be fine-tuned as a Full Wave, Light Wave, mix, ... model (a BERT checkpoint as the official
code's BERT layers: ``full_wave_official`` and ``mix_bert``).

Why the diffusion copy is exact:

- ViT and GPT-2 are pre-LN: a layer is ``x + Attn(LN₁ x)``, then ``x + MLP(LN₂ x)``: the diffusion preset's Euler
  step of size 1 on the residual fields ``Attn(LN x)`` and ``MLP(LN x)``; ``LN₂`` becomes the FFN's joint LayerNorm,
  through which Full Wave carries the velocity by the chain rule. The final LayerNorm is the backbone's.
- BERT is post-LN: ``LN(x + Attn x)``, then ``LN(x + MLP x)``: odeformer's ``norm="post"`` layout, whose joint
  LayerNorms after each sublayer take BERT's ``attention.output.LayerNorm`` and ``output.LayerNorm``. Its embedding
  is ``LN(E_tok + E_pos + E_type[0])``: the token type is fixed to 0 and folded into the position table,
  ``E_pos' = E_pos + E_type[0]``, and the LayerNorm is :class:`~odeformer.MaskedLM`'s ``embed_norm``.
- Attention: HF's separate query/key/value maps (GPT-2: one ``Conv1D``, which stores ``Wᵀ``) become the one ``qkv``
  Linear, rows ``[W_q; W_k; W_v]``, heads contiguous inside each, and both scale scores by ``1/sqrt(head_dim)``.

The weights are **copied**, not shared: the fused ``qkv`` and folded position tables are new tensors anyway, the HF
model is left untouched, and training the odeformer model does not change it. The copy has the HF model's dtype and
device, and its train/eval mode. Dropout rates are not carried over (odeformer's dropout sits on the attention
weights and the FFN's hidden and output, not where HF puts it); pass ``dropout=`` to train with some.

Supported classes and what equals what (``diffusion``, eval mode):

========================== ============= ==========================================================================
HF class                   odeformer     equal outputs
========================== ============= ==========================================================================
ViTForImageClassification  ``ViT``       ``model(x) == hf(x).logits``; ``model.encode(x) == last_hidden_state``
ViTModel                   ``ViT``       ``model.encode(x) == last_hidden_state``; ``model(x) == pooler_output``
                                         (the head is the pooler, ``tanh(W h_cls + b)``; without a pooler, the
                                         identity: ``model(x) == last_hidden_state[:, 0]``)
GPT2LMHeadModel            ``CausalLM``  ``model(t) == logits`` (tied or untied ``lm_head``); ``model.encode(t)``
GPT2Model                  ``CausalLM``  ``model.encode(t) == last_hidden_state`` (``model(t)``: logits by ``wte``)
BertModel                  ``MaskedLM``  ``model.encode(t, mask) == last_hidden_state``; ``model.classify(t, mask)
                                         == pooler_output`` (``pool="first"``, the pooler as classifier)
========================== ============= ==========================================================================

``MaskedLM`` takes ``padding_mask`` (True on real tokens; HF's 0/1 ``attention_mask`` as it is, of any integer or
floating dtype); without one it treats ``pad_token_id`` as padding, where HF attends to every token. Anything the
odeformer model cannot reproduce (a non-square image, another position embedding, a scaled or cross attention, an
activation without an exact velocity rule, a zero-width MLP, ...) is a one-line ``ValueError`` naming the config
field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

import solvers

from .backbone import SolverSchedule, schedule
from .continuous import ContinuousSolver
from .registry import Solver
from .tasks import CausalLM, MaskedLM, ViT

HF_ACTIVATION_TO_OURS = {
    "gelu": "gelu",
    "gelu_python": "gelu",  # the same erf GELU, written out in Python
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python_tanh": "gelu_tanh",  # the same tanh GELU, written out
    "gelu_accurate": "gelu_tanh",  # the same tanh GELU, its constant computed in Python
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
"""A Hugging Face config's activation name -> the name of the same function in :data:`odeformer.joint.ACTIVATIONS`
(only these have an exact velocity rule here)."""

OPTIONS = ("dt", "ln_mode", "impl", "dropout", "checkpoint")
"""Options :func:`from_hf` passes on to the task model; the rest of its shape comes from the HF config."""

SUPPORTED = ("ViTForImageClassification", "ViTModel", "GPT2LMHeadModel", "GPT2Model", "BertModel")


def from_hf(model: nn.Module, solver: SolverSchedule = "diffusion", **options: Any) -> nn.Module:
    """An odeformer model with ``model``'s weights (copied), integrated by ``solver``; see the module docstring.

    ``model``: one of :data:`SUPPORTED` (built from a config or ``from_pretrained``). ``solver``: any discrete solver
    the task models take (a preset name, a :class:`~odeformer.Solver`, one per layer, ...). ``options``: ``dt``,
    ``ln_mode``, ``impl``, ``dropout``, ``checkpoint`` (and ``pad_id`` for BERT), passed to the task model.
    """
    name = type(model).__name__
    if name not in SUPPORTED:
        raise ValueError(f"from_hf supports {', '.join(SUPPORTED)}; got {name}.")
    allowed = OPTIONS + (("pad_id",) if name == "BertModel" else ())
    for key in options:
        if key in ("knots", "parameterization", "time"):
            raise ValueError(
                f"from_hf copies one set of weights per layer at its own step; {key} makes another model (weights "
                "as a function of depth-time, or steps of T / depth): train one with it instead."
            )
        if key not in allowed:
            raise ValueError(
                f"from_hf option {key!r} is not allowed: the shape comes from the model's config; "
                f"choose from {', '.join(allowed)}."
            )
    _check_solver(solver, model.config, post=name == "BertModel")
    build = {"ViT": _vit, "GPT": _gpt2, "Ber": _bert}[name[:3]]
    parameter = next(model.parameters())
    with torch.random.fork_rng(devices=[]):  # the throwaway initialisation leaves the caller's RNG as it was
        out, copies = build(model, solver, options)
    out = out.to(device=parameter.device, dtype=parameter.dtype)
    copier = _Copier(out)
    with torch.no_grad():
        for target, source in copies(out):
            copier(target, source)
    copier.check()
    return out.train(model.training)


# ---------------------------------------------------------------------------------------------------------- checks


def _check_solver(solver: SolverSchedule, config, post: bool) -> None:
    if isinstance(solver, ContinuousSolver):
        raise ValueError("from_hf needs a discrete solver: a continuous one ties every layer's weights into one.")
    presets: list[Solver] = schedule(solver, config.num_hidden_layers)
    if post and any(p.block_stepper is solvers.Whole for p in presets):
        raise ValueError(
            "a post-LN model (BERT) needs a LayerNorm after each sublayer; solvers that step the whole block at once "
            "(heun, rk4) have one place for it. Choose a split preset (diffusion, full_wave, light_wave, mix, ...)."
        )


def _eps(hf: nn.Module) -> float:
    """The epsilon the model's LayerNorms use (read from the modules: a config edited after the model was built no
    longer describes them); LayerNorms of different epsilons are a one-line error."""
    found = {m.eps for m in hf.modules() if isinstance(m, nn.LayerNorm)}
    if len(found) != 1:
        raise ValueError(f"from_hf: the model's LayerNorms use the epsilons {sorted(found)}; odeformer takes one.")
    return found.pop()


def _refuse(config, field: str, allowed: Callable[[Any], bool], why: str) -> None:
    """A one-line error naming ``field`` when ``config``'s value for it is not ``allowed``."""
    if hasattr(config, field) and not allowed(getattr(config, field)):
        raise ValueError(f"from_hf: config.{field}={getattr(config, field)!r} is not supported: {why}.")


def _activation(config, field: str) -> str:
    value = getattr(config, field)
    if not isinstance(value, str) or value not in HF_ACTIVATION_TO_OURS:
        raise ValueError(
            f"from_hf: config.{field}={value!r} is not supported: use one of {', '.join(HF_ACTIVATION_TO_OURS)} "
            "(the activations with an exact velocity rule)."
        )
    return HF_ACTIVATION_TO_OURS[value]


def _width(config, field: str, default: int | None = None) -> int:
    """The MLP's hidden width, ``config.<field>`` (``None``: ``default`` where HF has one, GPT-2's ``4 * n_embd``)."""
    value = getattr(config, field)
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or value < 1:
        raise ValueError(
            f"from_hf: config.{field}={value!r} is not supported: the MLP's width must be a positive int "
            "(odeformer has no zero-width MLP)."
        )
    return value


def _heads(config) -> int:
    heads = config.num_attention_heads
    _refuse(config, "head_dim", lambda d: d is None or d * heads == config.hidden_size, "heads * head_dim != hidden")
    return heads


def _square(config, field: str) -> int:
    value = getattr(config, field)
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[0] != value[1]:
            raise ValueError(f"from_hf: config.{field}={value!r} is not supported: odeformer.ViT is square only.")
        value = value[0]
    return int(value)


# ---------------------------------------------------------------------------------------------------------- copying


class _Copier:
    """Copies tensors into ``model``'s parameters and checks that every parameter but the schemes' own was set."""

    def __init__(self, model: nn.Module):
        self.model, self.written = model, set()

    def __call__(self, target: Tensor, source: Tensor) -> None:
        if target.shape != source.shape:
            raise RuntimeError(f"from_hf: a {tuple(source.shape)} weight does not fit {tuple(target.shape)}.")
        target.copy_(source)
        self.written.add(id(target))

    def check(self) -> None:
        missed = [
            name
            for name, p in self.model.named_parameters()
            if id(p) not in self.written and ".block_stepper." not in name  # a scheme's own parameters (λ, γ) are new
        ]
        if missed:
            raise RuntimeError(f"from_hf left parameters uncopied: {', '.join(missed)}.")


Pairs = list[tuple[Tensor, Tensor]]


def _linear(target: nn.Linear, weight: Tensor, bias: Tensor | None) -> Pairs:
    pairs = [(target.weight, weight)]
    if target.bias is not None:
        pairs.append((target.bias, bias))
    return pairs


def _norm(target: nn.Module, source: nn.LayerNorm) -> Pairs:
    return [(target.weight, source.weight), (target.bias, source.bias)]


def _qkv(target: nn.Linear, q: nn.Linear, k: nn.Linear, v: nn.Linear) -> Pairs:
    """HF's separate q/k/v maps as one Linear: rows ``[W_q; W_k; W_v]``."""
    weight = torch.cat([q.weight, k.weight, v.weight], 0)  # (3D, D)
    bias = None if q.bias is None else torch.cat([q.bias, k.bias, v.bias])
    return _linear(target, weight, bias)


def _layer(layer, attention: Pairs, ffn_norm, fc1: Pairs, fc2: Pairs, attention_norm=None) -> Pairs:
    """One odeformer layer's pairs: attention (qkv, proj), the norms, the FFN."""
    pairs = attention + fc1 + fc2
    if attention_norm is not None:
        pairs += _norm(layer.attention.norm, attention_norm)
    if ffn_norm is not None:
        pairs += _norm(layer.ffn.norm, ffn_norm)
    return pairs


# ---------------------------------------------------------------------------------------------------------- ViT


def _vit(hf: nn.Module, solver: Solver, options: dict):
    config = hf.config
    base = hf.vit if hasattr(hf, "vit") else hf
    image, patch = _square(config, "image_size"), _square(config, "patch_size")
    if image % patch:
        raise ValueError(
            f"from_hf: config.image_size={image} is not a multiple of config.patch_size={patch} "
            "(odeformer.ViT uses every pixel)."
        )
    pooler = getattr(base, "pooler", None)
    if pooler is not None:
        _refuse(config, "pooler_act", lambda a: a == "tanh", "the pooler's activation must be tanh")
    classifier = getattr(hf, "classifier", None)
    model = ViT(
        image_size=image,
        patch_size=patch,
        in_chans=config.num_channels,
        num_classes=1,
        depth=config.num_hidden_layers,
        dim=config.hidden_size,
        heads=_heads(config),
        solver=solver,
        pool="cls",
        mlp_hidden=_width(config, "intermediate_size"),
        activation=_activation(config, "hidden_act"),
        norm="pre",
        norm_eps=_eps(hf),
        qkv_bias=config.qkv_bias,
        **options,
    )
    if isinstance(classifier, nn.Linear):
        model.head = nn.Linear(classifier.in_features, classifier.out_features)
    elif pooler is not None:
        model.head = nn.Sequential(nn.Linear(pooler.dense.in_features, pooler.dense.out_features), nn.Tanh())
    else:
        model.head = nn.Identity()

    def copies(model: ViT) -> Pairs:
        embeddings = base.embeddings
        pairs = _linear(
            model.patch_embed,
            embeddings.patch_embeddings.projection.weight,
            embeddings.patch_embeddings.projection.bias,
        )
        pairs += [(model.cls_token, embeddings.cls_token), (model.pos_embed, embeddings.position_embeddings)]
        blocks = base.layers if hasattr(base, "layers") else base.encoder.layer  # transformers 5 / 4
        for layer, block in zip(model.backbone.layers, blocks):
            if hasattr(block.attention, "q_proj"):  # transformers 5
                a = block.attention
                attention = _qkv(layer.attention.qkv, a.q_proj, a.k_proj, a.v_proj) + _linear(
                    layer.attention.proj, a.o_proj.weight, a.o_proj.bias
                )
                fc1, fc2 = block.mlp.fc1, block.mlp.fc2
            else:  # transformers 4
                a = block.attention.attention
                out = block.attention.output.dense
                attention = _qkv(layer.attention.qkv, a.query, a.key, a.value) + _linear(
                    layer.attention.proj, out.weight, out.bias
                )
                fc1, fc2 = block.intermediate.dense, block.output.dense
            pairs += _layer(
                layer,
                attention,
                block.layernorm_after,
                _linear(layer.ffn.mlp.fc1, fc1.weight, fc1.bias),
                _linear(layer.ffn.mlp.fc2, fc2.weight, fc2.bias),
                attention_norm=block.layernorm_before,
            )
        pairs += _norm(model.backbone.norm, base.layernorm)
        if isinstance(classifier, nn.Linear):
            pairs += _linear(model.head, classifier.weight, classifier.bias)
        elif pooler is not None:
            pairs += _linear(model.head[0], pooler.dense.weight, pooler.dense.bias)
        return pairs

    return model, copies


# ---------------------------------------------------------------------------------------------------------- GPT-2


def _gpt2(hf: nn.Module, solver: Solver, options: dict):
    config = hf.config
    base = hf.transformer if hasattr(hf, "transformer") else hf
    _refuse(config, "scale_attn_weights", bool, "odeformer scales attention scores by 1/sqrt(head_dim)")
    _refuse(config, "scale_attn_by_inverse_layer_idx", lambda v: not v, "odeformer's layers share one scaling")
    _refuse(config, "add_cross_attention", lambda v: not v, "odeformer's CausalLM has no cross-attention")
    dim = config.hidden_size
    model = CausalLM(
        vocab_size=config.vocab_size,
        max_len=config.max_position_embeddings,
        depth=config.num_hidden_layers,
        dim=dim,
        heads=_heads(config),
        solver=solver,
        mlp_hidden=_width(config, "n_inner", default=4 * dim),
        activation=_activation(config, "activation_function"),
        norm="pre",
        norm_eps=_eps(hf),
        qkv_bias=True,
        **options,
    )
    lm_head = getattr(hf, "lm_head", None)
    untied = lm_head is not None and lm_head.weight is not base.wte.weight
    if untied:
        model.head = nn.Linear(dim, config.vocab_size, bias=False)

    def copies(model: CausalLM) -> Pairs:
        pairs = [(model.embed.tokens.weight, base.wte.weight), (model.embed.positions.weight, base.wpe.weight)]
        for layer, block in zip(model.backbone.layers, base.h):
            attn, mlp = block.attn, block.mlp
            attention = _linear(layer.attention.qkv, attn.c_attn.weight.t(), attn.c_attn.bias) + _linear(
                layer.attention.proj, attn.c_proj.weight.t(), attn.c_proj.bias
            )  # Conv1D stores the transposed weight
            pairs += _layer(
                layer,
                attention,
                block.ln_2,
                _linear(layer.ffn.mlp.fc1, mlp.c_fc.weight.t(), mlp.c_fc.bias),
                _linear(layer.ffn.mlp.fc2, mlp.c_proj.weight.t(), mlp.c_proj.bias),
                attention_norm=block.ln_1,
            )
        pairs += _norm(model.backbone.norm, base.ln_f)
        if untied:
            pairs.append((model.head.weight, lm_head.weight))
        return pairs

    return model, copies


# ---------------------------------------------------------------------------------------------------------- BERT


def _bert(hf: nn.Module, solver: Solver, options: dict):
    config = hf.config
    _refuse(config, "position_embedding_type", lambda v: v == "absolute", "odeformer has absolute positions only")
    _refuse(config, "is_decoder", lambda v: not v, "odeformer's MaskedLM is an encoder (bidirectional attention)")
    _refuse(config, "type_vocab_size", lambda v: v >= 1, "token type 0's embedding is folded into the positions")
    _refuse(config, "add_cross_attention", lambda v: not v, "odeformer's MaskedLM has no cross-attention")
    pad = config.pad_token_id
    options = {"pad_id": -1 if pad is None else pad, **options}
    model = MaskedLM(
        vocab_size=config.vocab_size,
        max_len=config.max_position_embeddings,
        depth=config.num_hidden_layers,
        dim=config.hidden_size,
        heads=_heads(config),
        solver=solver,
        pool="first",
        embed_norm=True,
        mlp_hidden=_width(config, "intermediate_size"),
        activation=_activation(config, "hidden_act"),
        norm="post",
        norm_eps=_eps(hf),
        qkv_bias=True,
        **options,
    )
    pooler = hf.pooler
    if pooler is not None:
        model.classifier = nn.Sequential(nn.Linear(pooler.dense.in_features, pooler.dense.out_features), nn.Tanh())

    def copies(model: MaskedLM) -> Pairs:
        embeddings = hf.embeddings
        positions = embeddings.position_embeddings.weight + embeddings.token_type_embeddings.weight[0]  # (T, D)
        pairs = [
            (model.embed.tokens.weight, embeddings.word_embeddings.weight),
            (model.embed.positions.weight, positions),
        ]
        pairs += _norm(model.embed_norm, embeddings.LayerNorm)
        for layer, block in zip(model.backbone.layers, hf.encoder.layer):
            a, out = block.attention.self, block.attention.output
            attention = _qkv(layer.attention.qkv, a.query, a.key, a.value) + _linear(
                layer.attention.proj, out.dense.weight, out.dense.bias
            )
            pairs += _layer(
                layer,
                attention,
                None,  # post-LN: the FFN reads the state as it is
                _linear(layer.ffn.mlp.fc1, block.intermediate.dense.weight, block.intermediate.dense.bias),
                _linear(layer.ffn.mlp.fc2, block.output.dense.weight, block.output.dense.bias),
            )
            pairs += _norm(layer.after_attention.module, out.LayerNorm)
            pairs += _norm(layer.after_ffn.module, block.output.LayerNorm)
        if pooler is not None:
            pairs += _linear(model.classifier[0], pooler.dense.weight, pooler.dense.bias)
        return pairs

    return model, copies
