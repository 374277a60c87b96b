"""Language models: causal (GPT-like) and masked (BERT-like, with a sequence-classification head)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..backbone import Backbone, SolverSchedule, transformer
from ..generate import generate
from ..hooks import direct_calls
from ._common import Footprint, TaskModel, TaskSpec, check_tokens, register, transformer_footprint

if TYPE_CHECKING:
    from ..generate import KVCache


class _Embedding(nn.Module):
    def __init__(self, vocab_size: int, max_len: int, dim: int):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Embedding(max_len, dim)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        return self.tokens(tokens) + self.positions(positions)  # (B, T, D)


class CausalLM(TaskModel):
    """Token + position embedding -> causal backbone -> next-token logits ``(B, T, vocab_size)`` (tied weights).

    ``CausalLM(vocab_size=65, max_len=64, depth=4, dim=64, heads=4, solver="full_wave")(tokens)``; ``max_len`` is the
    context length in tokens;
    :meth:`generate` continues prompts, with a key/value cache (``cache=`` of :meth:`forward`: new positions only).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 128,
        depth: int = 4,
        dim: int = 128,
        heads: int = 4,
        dt: float | None = None,
        solver: SolverSchedule = "diffusion",
        **backbone_options,
    ):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = _Embedding(vocab_size, max_len, dim)
        self.backbone = transformer(depth, dim, heads, solver, dt, mask="causal", **backbone_options)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.tokens.weight

    def encode(self, tokens: Tensor, *, record: list | None = None, cache: KVCache | None = None) -> Tensor:
        """Contextual features ``(B, T, D)`` (after the final norm), before the head. With ``cache`` (a
        :class:`~odeformer.generate.KVCache`), ``tokens`` are the positions after those the cache holds."""
        check_tokens(tokens, self.vocab_size, self.max_len, "CausalLM", values=not self.training)
        if cache is None:
            return self.backbone(self.embed(tokens), record=record)
        return self.backbone(self.embed(tokens, self._start(tokens, cache)), record=record, cache=cache)

    def forward(self, tokens: Tensor, *, record: list | None = None, cache: KVCache | None = None) -> Tensor:
        if cache is not None and cache.bound is not None and record is None and not torch.is_grad_enabled():
            logits = self._bound_pass(tokens, cache)
            if logits is not None:
                return logits
        return self.head(self.encode(tokens, record=record, cache=cache))

    def _start(self, tokens: Tensor, cache: KVCache) -> int:
        """The position of the first of ``tokens``: the positions ``cache`` holds (they must fit in ``max_len``)."""
        start = cache.length
        if start + tokens.shape[1] > self.max_len:
            raise ValueError(
                f"CausalLM: {tokens.shape[1]} new tokens after the {start} cached ones exceed max_len={self.max_len}."
            )
        return start

    def _bound_pass(self, tokens: Tensor, cache: KVCache) -> Tensor | None:
        """:meth:`forward` with a binding cache (``new_cache(..., bind=True)``, what :meth:`generate` makes): the
        embedding and the head read from their weights, bound on the cache's first pass, and the backbone's own bound
        pass; the same operations as the modules' (rows of the embedding tables, the head's product), so the same
        logits. ``None`` (the module path runs) where a module it leaves out has a hook or is in training mode."""
        binding = cache.bound.get(self)
        if binding is None:
            binding = cache.bound[self] = self._bind()
        if not binding:
            return None
        direct, token_weight, position_weight, head_weight, head_bias = binding
        if not direct():
            return None
        check_tokens(tokens, self.vocab_size, self.max_len, "CausalLM", values=not self.training)
        start, n = self._start(tokens, cache), tokens.shape[1]
        x = F.embedding(tokens, token_weight) + position_weight.narrow(0, start, n)
        h = self.backbone._bound_pass(x, cache)
        return F.linear(self.backbone(x, cache=cache) if h is None else h, head_weight, head_bias)

    def _bind(self) -> tuple:
        """What :meth:`_bound_pass` reads: the check that it may leave out the embedding, backbone and head modules,
        and their weights; empty where one of them is not the plain module it is built with."""
        embed, head = self.embed, self.head
        tables = (embed.tokens, embed.positions)
        if type(embed) is not _Embedding or type(head) is not nn.Linear or not isinstance(self.backbone, Backbone):
            return ()
        if any(type(table) is not nn.Embedding or table.max_norm is not None for table in tables):
            return ()
        direct = direct_calls([embed, *tables, self.backbone, head])
        return direct, embed.tokens.weight, embed.positions.weight, head.weight, head.bias

    generate = generate  # model.generate(prompt_tokens, max_new_tokens, temperature, top_k, generator, ...)


class MaskedLM(TaskModel):
    """BERT-like encoder: ``forward`` gives masked-token logits ``(B, T, vocab_size)``; ``classify`` gives sequence
    logits ``(B, num_classes)`` by mean pooling over real tokens (or the first token, ``pool="first"``).

    Padding: ``padding_mask`` (B, T), ``True`` on real tokens: bool, or 0/1 of an integer or floating dtype (as Hugging
    Face's ``attention_mask``: 1 = real token); by default every token ``!= pad_id``.

    ``embed_norm`` (default: on when ``norm="post"``) adds a LayerNorm on the embeddings, ``LN(E_tok + E_pos)``, as
    BERT has; its epsilon is the backbone's post-norm epsilon (``norm_eps``, default 1e-6).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        depth: int = 4,
        dim: int = 64,
        heads: int = 4,
        dt: float | None = None,
        solver: SolverSchedule = "diffusion",
        num_classes: int | None = None,
        pad_id: int = 0,
        pool: str = "mean",
        embed_norm: bool | None = None,
        **backbone_options,
    ):
        super().__init__()
        if pool not in ("mean", "first"):
            raise ValueError(f"pool must be 'mean' or 'first', got {pool!r}.")
        self.vocab_size, self.max_len, self.pad_id, self.pool = vocab_size, max_len, pad_id, pool
        self.embed = _Embedding(vocab_size, max_len, dim)
        if embed_norm is None:
            embed_norm = backbone_options.get("norm") == "post"
        eps = backbone_options.get("norm_eps")
        self.embed_norm = nn.LayerNorm(dim, eps=1e-6 if eps is None else eps) if embed_norm else nn.Identity()
        self.backbone = transformer(depth, dim, heads, solver, dt, mask="full", **backbone_options)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.tokens.weight
        self.classifier = nn.Linear(dim, num_classes) if num_classes else None

    def encode(self, tokens: Tensor, padding_mask: Tensor | None = None, *, record: list | None = None) -> Tensor:
        """Contextual features ``(B, T, D)``."""
        check_tokens(tokens, self.vocab_size, self.max_len, "MaskedLM", values=not self.training)
        keys = self._real_tokens(tokens, padding_mask)[:, None, None, :]  # (B, 1, 1, T): queries see real tokens only
        return self.backbone(self.embed_norm(self.embed(tokens)), record=record, attn_mask=keys)

    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None, *, record: list | None = None) -> Tensor:
        return self.head(self.encode(tokens, padding_mask, record=record))

    def classify(self, tokens: Tensor, padding_mask: Tensor | None = None, *, record: list | None = None) -> Tensor:
        if self.classifier is None:
            raise ValueError("MaskedLM.classify needs a classification head: build it with num_classes=...")
        real = self._real_tokens(tokens, padding_mask)
        h = self.encode(tokens, real, record=record)  # (B, T, D)
        if self.pool == "first":
            return self.classifier(h[:, 0])
        weights = real.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
        return self.classifier((h * weights).sum(1) / weights.sum(1).clamp_min(1.0))

    def _real_tokens(self, tokens: Tensor, padding_mask: Tensor | None) -> Tensor:
        """The padding mask as bool ``(B, T)``, ``True`` on real tokens; a 0/1 mask (HF's ``attention_mask``) is read
        with ``.bool()``: passed on as it is, SDPA would add a floating mask to the scores instead of masking."""
        if padding_mask is None:
            return tokens != self.pad_id
        if padding_mask.shape != tokens.shape:
            raise ValueError(
                f"padding_mask must have the tokens' shape {tuple(tokens.shape)}, got {tuple(padding_mask.shape)}."
            )
        if padding_mask.dtype == torch.bool:
            return padding_mask
        allowed = "padding_mask must be bool (True on real tokens) or 0/1 like Hugging Face's attention_mask"
        if padding_mask.is_complex():
            raise ValueError(f"{allowed}; got dtype {padding_mask.dtype}.")
        if not torch.compiler.is_compiling():
            other = padding_mask[(padding_mask != 0) & (padding_mask != 1)]
            if other.numel():
                raise ValueError(f"{allowed}; got {padding_mask.dtype} values such as {other[0].item()}.")
        return padding_mask.bool()


def _text_batch(data, model: CausalLM, size: int):
    """``size`` consecutive windows of ``max_len`` tokens from the start of the validation stream."""
    stream, length = data.splits["val"][0], model.max_len
    starts = torch.arange(size) * length
    return (stream[starts[:, None] + torch.arange(length)],), {}


def _sequence_batch(data, model: MaskedLM, size: int):
    """The first ``size`` validation sentences; attention reads their real tokens only."""
    tokens = data.splits["val"][0][:size]
    keys = (tokens != data.meta["pad_id"])[:, None, None, :]
    return (tokens,), {"attn_mask": keys}


def _text_footprint(options: dict, meta: dict, blocks: int) -> Footprint:
    """A context of ``max_len`` tokens; the head is the token embedding (tied), onto the vocabulary."""
    tokens, d, vocab = options.get("max_len") or meta.get("max_len", 1), options["dim"], meta.get("vocab_size", 1)
    return transformer_footprint(options, blocks, tokens, vocab * d + tokens * d, vocab, tied=True, logits=2)


def _sequence_footprint(options: dict, meta: dict, blocks: int) -> Footprint:
    """Sequences of the dataset's ``max_len`` tokens; a classification head onto its classes."""
    tokens, d, vocab = options.get("max_len") or meta.get("max_len", 1), options["dim"], meta.get("vocab_size", 1)
    return transformer_footprint(options, blocks, tokens, vocab * d + tokens * d, meta.get("num_classes", 1))


register(
    TaskSpec(
        "causal_lm",
        CausalLM,
        data="text",
        sizes=("vocab_size",),
        objective="next_token",
        diagnostic_batch=_text_batch,
        first_token="the first position",
        options_to=transformer,
        set_by_model=("mask",),
        default=True,
        footprint=_text_footprint,
    )
)
register(
    TaskSpec(
        "masked_lm",
        MaskedLM,
        data="sequence",
        sizes=("vocab_size", "max_len", "num_classes", "pad_id"),
        objective="sequence_classification",
        diagnostic_batch=_sequence_batch,
        first_token="the first position",
        options_to=transformer,
        set_by_model=("mask",),
        default=True,
        footprint=_sequence_footprint,
    )
)
