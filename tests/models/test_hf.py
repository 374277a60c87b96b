"""``odeformer.from_hf``: Hugging Face ViT, GPT-2 and BERT models as odeformer models with the same weights.

Models are built from configs (random init, then every weight perturbed so that LayerNorm gains and biases are not
their identity init), never downloaded. Under diffusion (dt = 1) the copy computes the original's outputs to float64
round-off; under any other preset the same (copied) weights train.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import odeformer
from odeformer.hf import HF_ACTIVATION_TO_OURS
from odeformer.joint import JointLayerNorm, activation

transformers = pytest.importorskip("transformers")

EXAMPLES = settings(max_examples=8, deadline=None)
ACTS = (
    "gelu",
    "gelu_python",
    "gelu_new",
    "gelu_pytorch_tanh",
    "gelu_python_tanh",
    "gelu_accurate",
    "relu",
    "silu",
    "swish",
)


def _built(cls, config, seed: int, dtype=torch.float64, **kwargs):
    """``cls(config)`` in eval mode with every parameter perturbed (from ``seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config, **kwargs).to(dtype).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return model


def _vit_config(heads=2, head_dim=4, depth=2, hidden=24, image=8, patch=2, channels=1, **kw):
    return transformers.ViTConfig(
        hidden_size=heads * head_dim,
        num_hidden_layers=depth,
        num_attention_heads=heads,
        intermediate_size=hidden,
        image_size=image,
        patch_size=patch,
        num_channels=channels,
        **kw,
    )


def _gpt2_config(heads=2, head_dim=4, depth=2, n_inner=None, vocab=37, positions=12, **kw):
    return transformers.GPT2Config(
        n_embd=heads * head_dim,
        n_layer=depth,
        n_head=heads,
        n_inner=n_inner,
        vocab_size=vocab,
        n_positions=positions,
        bos_token_id=0,
        eos_token_id=0,
        **kw,
    )


def _bert_config(heads=2, head_dim=4, depth=2, hidden=24, vocab=37, positions=12, **kw):
    return transformers.BertConfig(
        hidden_size=heads * head_dim,
        num_hidden_layers=depth,
        num_attention_heads=heads,
        intermediate_size=hidden,
        vocab_size=vocab,
        max_position_embeddings=positions,
        **kw,
    )


def _max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


# ------------------------------------------------------------------------------------------------ diffusion == HF


@EXAMPLES
@given(
    seed=st.integers(0, 2**31 - 1),
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([2, 4, 8]),
    depth=st.integers(1, 3),
    hidden=st.integers(3, 40),
    patch=st.sampled_from([1, 2, 4]),
    channels=st.integers(1, 3),
    qkv_bias=st.booleans(),
    act=st.sampled_from(ACTS),
    eps=st.sampled_from([1e-12, 1e-6, 1e-5]),
    kind=st.sampled_from(["classifier", "pooler", "bare"]),
)
def test_vit_under_diffusion_computes_the_hf_model(
    seed, heads, head_dim, depth, hidden, patch, channels, qkv_bias, act, eps, kind
):
    config = _vit_config(
        heads, head_dim, depth, hidden, 8, patch, channels, qkv_bias=qkv_bias, hidden_act=act, layer_norm_eps=eps
    )
    config.num_labels = 5
    if kind == "classifier":
        hf = _built(transformers.ViTForImageClassification, config, seed)
    else:
        hf = _built(transformers.ViTModel, config, seed, add_pooling_layer=kind == "pooler")
    model = odeformer.from_hf(hf)
    images = torch.randn(3, channels, 8, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with torch.no_grad():
        out = hf(images)
        features = (hf.vit(images) if kind == "classifier" else out).last_hidden_state  # (B, P + 1, D)
        expected = {"classifier": "logits", "pooler": "pooler_output"}
        wanted = getattr(out, expected[kind]) if kind in expected else features[:, 0]
        assert _max_error(model.encode(images), features) < 1e-10
        assert _max_error(model(images), wanted) < 1e-10


@EXAMPLES
@given(
    seed=st.integers(0, 2**31 - 1),
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([2, 4, 8]),
    depth=st.integers(1, 3),
    n_inner=st.one_of(st.none(), st.integers(3, 41)),
    act=st.sampled_from(ACTS),
    tied=st.booleans(),
    lm_head=st.booleans(),
    length=st.integers(1, 12),
)
def test_gpt2_under_diffusion_computes_the_hf_model(seed, heads, head_dim, depth, n_inner, act, tied, lm_head, length):
    config = _gpt2_config(heads, head_dim, depth, n_inner, activation_function=act, tie_word_embeddings=tied)
    cls = transformers.GPT2LMHeadModel if lm_head else transformers.GPT2Model
    hf = _built(cls, config, seed)
    model = odeformer.from_hf(hf)
    tokens = torch.randint(0, 37, (3, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = hf(tokens)
        if lm_head:
            assert (model.head.weight is model.embed.tokens.weight) == tied
            assert _max_error(model(tokens), out.logits) < 1e-10
            features = hf.transformer(tokens).last_hidden_state
        else:
            features = out.last_hidden_state
        assert _max_error(model.encode(tokens), features) < 1e-10


@EXAMPLES
@given(
    seed=st.integers(0, 2**31 - 1),
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([2, 4, 8]),
    depth=st.integers(1, 3),
    hidden=st.integers(3, 40),
    act=st.sampled_from(ACTS),
    types=st.integers(1, 3),
    pooler=st.booleans(),
    length=st.integers(1, 12),
)
def test_bert_under_diffusion_computes_the_hf_model(seed, heads, head_dim, depth, hidden, act, types, pooler, length):
    config = _bert_config(heads, head_dim, depth, hidden, hidden_act=act, type_vocab_size=types)
    hf = _built(transformers.BertModel, config, seed, add_pooling_layer=pooler)
    model = odeformer.from_hf(hf)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 37, (4, length), generator=g)
    real = torch.arange(length) < torch.randint(1, length + 1, (4, 1), generator=g)  # (B, T): padding at the end
    with torch.no_grad():
        out = hf(tokens, attention_mask=real.long())
        assert _max_error(model.encode(tokens, real), out.last_hidden_state) < 1e-10
        if pooler:
            assert _max_error(model.classify(tokens, real), out.pooler_output) < 1e-10
        else:
            assert model.classifier is None


@pytest.mark.parametrize("act", ACTS)
def test_every_supported_activation_name_is_hfs_function(act):
    """Each HF name from_hf accepts is odeformer's function of the same name in its table, to round-off."""
    x = torch.linspace(-8.0, 8.0, 1001, dtype=torch.float64)
    ours = activation(HF_ACTIVATION_TO_OURS[act]).phi(x)
    torch.testing.assert_close(ours, transformers.activations.ACT2FN[act](x), rtol=1e-14, atol=1e-15)
    hf = _built(transformers.GPT2Model, _gpt2_config(activation_function=act), 0)
    tokens = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert _max_error(odeformer.from_hf(hf).encode(tokens), hf(tokens).last_hidden_state) < 1e-10


def test_acts_are_every_supported_activation():
    """The table maps HF's names to ours: every key a name HF's configs use, every value a joint activation."""
    assert set(ACTS) == set(HF_ACTIVATION_TO_OURS)
    assert set(HF_ACTIVATION_TO_OURS.values()) <= set(odeformer.joint.ACTIVATIONS)


def test_bert_takes_hfs_attention_mask_as_it_is():
    """HF's 0/1 attention_mask, as long or converted to the model's float dtype, is the padding mask (1 = real)."""
    hf = _hf_models()["bert"]
    model = odeformer.from_hf(hf)
    tokens = torch.randint(1, 37, (3, 6), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        out = hf(tokens, attention_mask=attention_mask)
        for mask in (attention_mask, attention_mask.to(torch.float64), attention_mask.float()):
            assert _max_error(model.encode(tokens, mask), out.last_hidden_state) < 1e-10
            assert _max_error(model.classify(tokens, mask), out.pooler_output) < 1e-10


def test_float32_models_give_float32_copies_that_agree_to_float32_round_off():
    vit = _built(transformers.ViTForImageClassification, _vit_config(heads=4, head_dim=8), 1, dtype=torch.float32)
    gpt = _built(transformers.GPT2LMHeadModel, _gpt2_config(heads=4, head_dim=8), 2, dtype=torch.float32)
    bert = _built(transformers.BertModel, _bert_config(heads=4, head_dim=8), 3, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    images, tokens = torch.randn(4, 1, 8, 8, generator=g), torch.randint(1, 37, (4, 12), generator=g)
    real = torch.ones(4, 12, dtype=torch.bool)
    with torch.no_grad():
        pairs = [
            (odeformer.from_hf(vit)(images), vit(images).logits),
            (odeformer.from_hf(gpt)(tokens), gpt(tokens).logits),
            (odeformer.from_hf(bert).encode(tokens, real), bert(tokens).last_hidden_state),
        ]
    for ours, theirs in pairs:
        assert ours.dtype == torch.float32
        assert _max_error(ours, theirs) < 2e-5 * (1 + float(theirs.abs().max()))


# ------------------------------------------------------------------------------------------------ other presets


def _hf_models(seed=0):
    return {
        "vit": _built(transformers.ViTForImageClassification, _vit_config(qkv_bias=False), seed),
        "gpt2": _built(transformers.GPT2LMHeadModel, _gpt2_config(n_inner=13), seed),
        "bert": _built(transformers.BertModel, _bert_config(), seed),
    }


def _loss(kind, model):
    g = torch.Generator().manual_seed(0)
    if kind == "vit":
        return model(torch.randn(2, 1, 8, 8, generator=g, dtype=torch.float64)).square().mean()
    tokens = torch.randint(1, 37, (2, 12), generator=g)
    if kind == "gpt2":
        return model(tokens).square().mean()
    return model.classify(tokens).square().mean() + model(tokens).square().mean()


@pytest.mark.parametrize("solver", ["full_wave", "light_wave", "mix", "mix_bert", ["diffusion", "full_wave"]])
@pytest.mark.parametrize("kind", ["vit", "gpt2", "bert"])
def test_other_presets_train_the_same_weights(kind, solver):
    hf = _hf_models()[kind]
    model = odeformer.from_hf(hf, solver=solver).train()
    loss = _loss(kind, model)
    assert torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    # every copied weight moves (light_wave's first λ has a zero gradient: its momentum starts at X₋₁ = X₀)
    frozen = [n for n, p in model.named_parameters() if ".block_stepper." not in n and not p.grad.abs().sum() > 0]
    assert not frozen, frozen
    # the weights are the HF ones (the scheme's own parameters, λ, are new)
    reference = odeformer.from_hf(hf).state_dict()
    for name, value in model.state_dict().items():
        if ".block_stepper." not in name:
            assert torch.equal(value, reference[name]), name


def test_full_wave_joint_layer_norm_and_mlp_read_the_hf_parameters():
    vit, gpt, bert = _hf_models().values()
    model = odeformer.from_hf(vit, solver="full_wave")
    assert model.backbone.layers[0].stepper.second_order and model.backbone.layers[0].dt == 0.5
    blocks = vit.vit.layers if hasattr(vit.vit, "layers") else vit.vit.encoder.layer  # transformers 5 / 4
    for layer, block in zip(model.backbone.layers, blocks):
        assert isinstance(layer.ffn.norm, JointLayerNorm)
        assert torch.equal(layer.ffn.norm.weight, block.layernorm_after.weight)
        assert torch.equal(layer.ffn.norm.bias, block.layernorm_after.bias)
        assert layer.ffn.norm.eps == vit.config.layer_norm_eps
        assert torch.equal(layer.attention.norm.weight, block.layernorm_before.weight)
        fc1 = block.mlp.fc1 if hasattr(block, "mlp") else block.intermediate.dense
        fc2 = block.mlp.fc2 if hasattr(block, "mlp") else block.output.dense
        assert torch.equal(layer.ffn.mlp.fc1.weight, fc1.weight) and torch.equal(layer.ffn.mlp.fc2.bias, fc2.bias)
        assert layer.attention.qkv.bias is None  # qkv_bias=False in this config
    model = odeformer.from_hf(gpt, solver="full_wave")
    for layer, block in zip(model.backbone.layers, gpt.transformer.h):
        assert torch.equal(layer.ffn.norm.weight, block.ln_2.weight)
        assert torch.equal(layer.ffn.mlp.fc1.weight, block.mlp.c_fc.weight.t())  # Conv1D stores Wᵀ
        assert torch.equal(layer.attention.qkv.weight, block.attn.c_attn.weight.t())
        assert layer.ffn.mlp.activation_name == "gelu_tanh"  # GPT-2's gelu_new
    model = odeformer.from_hf(bert, solver="full_wave")
    for layer, block in zip(model.backbone.layers, bert.encoder.layer):
        assert isinstance(layer.after_attention.module, JointLayerNorm)
        assert torch.equal(layer.after_attention.module.weight, block.attention.output.LayerNorm.weight)
        assert torch.equal(layer.after_ffn.module.bias, block.output.LayerNorm.bias)
        q, k, v = block.attention.self.query, block.attention.self.key, block.attention.self.value
        assert torch.equal(layer.attention.qkv.weight, torch.cat([q.weight, k.weight, v.weight]))
        assert torch.equal(layer.ffn.mlp.fc1.weight, block.intermediate.dense.weight)


# ------------------------------------------------------------------------------------------------ copies, state


def test_weights_are_copied_not_shared_and_the_hf_model_is_untouched():
    hf = _hf_models()["vit"]
    before = {k: v.clone() for k, v in hf.state_dict().items()}
    rng = torch.get_rng_state()
    model = odeformer.from_hf(hf, solver="full_wave")
    assert torch.equal(torch.get_rng_state(), rng)  # the throwaway initialisation used a forked RNG
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert all(torch.equal(v, before[k]) for k, v in hf.state_dict().items())
    hf_pointers = {p.data_ptr() for p in hf.parameters()}
    assert not any(p.data_ptr() in hf_pointers for p in model.parameters())


def test_the_copy_takes_the_hf_models_mode_and_dtype():
    hf = _hf_models()["gpt2"]
    assert not odeformer.from_hf(hf).training
    hf.train()
    model = odeformer.from_hf(hf)
    assert model.training and all(p.dtype == torch.float64 for p in model.parameters())


def test_a_saved_checkpoint_loads_with_from_pretrained_and_converts(tmp_path):
    """docs/models.md's recipe, on a checkpoint written here (no download)."""
    _hf_models()["vit"].save_pretrained(tmp_path)
    hf = transformers.ViTForImageClassification.from_pretrained(tmp_path).eval()
    model = odeformer.from_hf(hf, solver="full_wave")
    images = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=hf.dtype)
    with torch.no_grad():
        assert _max_error(odeformer.from_hf(hf)(images), hf(images).logits) < 1e-5
    assert model(images).shape == (2, hf.config.num_labels)


def test_masked_lm_normalises_its_embeddings_in_the_post_norm_layout():
    post = odeformer.MaskedLM(37, 12, depth=1, dim=8, heads=2, norm="post", norm_eps=1e-9)
    assert isinstance(post.embed_norm, torch.nn.LayerNorm) and post.embed_norm.eps == 1e-9
    assert isinstance(odeformer.MaskedLM(37, 12, depth=1, dim=8, heads=2).embed_norm, torch.nn.Identity)
    tokens = torch.randint(1, 37, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        post.embed_norm.bias.fill_(3.0)  # the backbone reads LN(E_tok + E_pos): a shifted bias changes the output
        before = post.encode(tokens)
        post.embed_norm.bias.fill_(-3.0)
        assert _max_error(post.encode(tokens), before) > 1e-3


def test_bert_without_a_mask_treats_the_pad_token_as_padding():
    hf = _hf_models()["bert"]
    model = odeformer.from_hf(hf)
    tokens = torch.tensor([[5, 6, 7, 0, 0]])
    with torch.no_grad():
        expected = hf(tokens, attention_mask=(tokens != 0).long()).last_hidden_state
        assert _max_error(model.encode(tokens), expected) < 1e-10
        everything = odeformer.from_hf(hf, pad_id=-1).encode(tokens)  # pad_id=-1: every token is real, as HF's default
        assert _max_error(everything, hf(tokens).last_hidden_state) < 1e-10


# ------------------------------------------------------------------------------------------------ refusals


def _error(hf, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        odeformer.from_hf(hf, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda: transformers.ViTModel(_vit_config(image=[8, 12])), "image_size"),
        (lambda: transformers.ViTModel(_vit_config(patch=[2, 4])), "patch_size"),
        (lambda: transformers.ViTModel(_vit_config(image=9, patch=2)), "image_size"),
        (lambda: transformers.ViTModel(_vit_config(pooler_act="relu")), "pooler_act"),
        (lambda: transformers.ViTModel(_vit_config(hidden_act="quick_gelu")), "hidden_act"),
        (lambda: transformers.GPT2Model(_gpt2_config(scale_attn_by_inverse_layer_idx=True)), "scale_attn_by_inverse"),
        (lambda: transformers.GPT2Model(_gpt2_config(scale_attn_weights=False)), "scale_attn_weights"),
        (lambda: transformers.GPT2Model(_gpt2_config(activation_function="gelu_fast")), "activation_function"),
        (lambda: transformers.BertModel(_bert_config(hidden_act="gelu_fast")), "hidden_act"),  # 0.7978845608: cut
        (lambda: transformers.BertModel(_bert_config(type_vocab_size=0)), "type_vocab_size"),
        (lambda: transformers.GPT2Model(_gpt2_config(n_inner=0)), "n_inner"),
        (lambda: transformers.BertModel(_bert_config(hidden=0)), "intermediate_size"),
        (lambda: transformers.ViTModel(_vit_config(hidden=0)), "intermediate_size"),
    ],
)
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning")  # HF's zero-width MLP Linears
def test_unsupported_config_fields_are_one_line_errors_naming_the_field(build, field):
    assert f"config.{field}" in _error(build())


def test_the_layer_norm_epsilon_is_read_from_the_modules_not_the_config():
    """A config edited after the model was built no longer describes its LayerNorms (before, the copy took the
    config's 0.5 and differed from the model by 1.25); LayerNorms of different epsilons are refused."""
    hf = _built(transformers.BertModel, _bert_config(), 0)
    hf.config.layer_norm_eps = 0.5
    tokens = torch.randint(1, 37, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert _max_error(odeformer.from_hf(hf).encode(tokens), hf(tokens).last_hidden_state) < 1e-10
    hf.embeddings.LayerNorm.eps = 1e-3
    assert "the model's LayerNorms use the epsilons [1e-12, 0.001]" in _error(hf)


def test_bert_position_embedding_types_other_than_absolute_are_refused():
    hf = _hf_models()["bert"]
    hf.config.position_embedding_type = "relative_key"  # a field of transformers 4's BertConfig
    assert "config.position_embedding_type" in _error(hf)


def test_unsupported_models_options_and_solvers_are_one_line_errors():
    from odeformer.continuous import continuous

    models = _hf_models()
    masked = transformers.BertForMaskedLM(_bert_config())
    assert "BertForMaskedLM" in _error(masked) and "ViTForImageClassification" in _error(masked)
    assert "'dim'" in _error(models["vit"], dim=64)
    assert "'pad_id'" in _error(models["vit"], pad_id=0)
    assert "discrete solver" in _error(models["vit"], solver=continuous(method="dopri5"))
    assert "post-LN" in _error(models["bert"], solver="heun")
    assert odeformer.from_hf(models["vit"], solver="heun")  # a pre-LN model takes a whole-block scheme
