"""Transformer sublayers as vector fields ``f(t, x)`` on the complete graph of tokens.

Self-attention with row-stochastic weights ``A(X)`` mixes each token with the others: ``Attn(X) = A(X) X W_v W_o``
(per head, then concatenated). Two forms make it a field:

- ``form="residual"``: ``f(X) = Attn(LN(X))``. Euler with ``dt = 1`` is exactly the pre-LN transformer sublayer
  ``X + Attn(LN(X))``.
- ``form="laplacian"``: ``f(X) = Attn(LN(X)) - X``. With ``W_v W_o = I`` and no LayerNorm this is ``(A - I) X``, minus
  a random-walk Laplacian: Euler on it is diffusion over the tokens, semi-implicit Euler on ``X'' = f(X)`` the wave
  equation (the Wavy Transformer's force, step ``dt = τ``).

Masks: ``"full"`` (every token sees every token), ``"causal"`` (token ``i`` sees ``j <= i``), ``"graph"`` (token ``i``
sees ``j`` only along the edges of a given graph, and itself: pass the mask from :func:`graph_mask` at call time).
Any field also takes an extra boolean ``attn_mask`` (True = may attend), e.g. for padding.

``impl="math"`` computes ``softmax(Q Kᵀ / sqrt(d_h))`` explicitly (supports forward-mode AD, returns the attention
matrix for diagnostics); ``impl="sdpa"`` calls ``scaled_dot_product_attention`` (fused; PyTorch has no forward-mode
derivative for it, so under ``torch.func`` transforms or ``torch.autograd.forward_ad`` it is a one-line error);
``impl="auto"`` (the default) is the fused path, and the math path by itself under such a transform. They agree to
1e-5 in float32; a query the mask lets attend to nothing (e.g. in a fully padded sequence) gets a zero output and zero
gradients from both.

A causal field also takes ``cache=`` (text generation, :mod:`odeformer.generate`): it is then evaluated on new
positions only, which attend to the keys and values the cache kept from earlier positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .joint import JointLayerNorm, JointMLP
from .joint.layer_norm import _joint_layer_norm

FORMS = ("residual", "laplacian")
MASKS = ("full", "causal", "graph")
IMPLS = ("auto", "sdpa", "math")


def _forward_mode() -> bool:
    """Whether a ``torch.func`` transform or a forward-mode AD level is active."""
    return torch._C._are_functorch_transforms_active() or torch.autograd.forward_ad._current_level >= 0


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}.")
    return value


def graph_mask(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Boolean ``(N, N)`` attention mask: ``True`` along the (symmetrised) edges ``edge_index`` (2, E), and on the
    diagonal (every node attends to itself)."""
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}.")
    mask = torch.eye(num_nodes, dtype=torch.bool, device=edge_index.device)
    mask[edge_index[0], edge_index[1]] = True
    mask[edge_index[1], edge_index[0]] = True
    return mask


class AttentionField(nn.Module):
    """Multi-head softmax self-attention as a field; see the module docstring for the forms, masks and impls.

    ``forward(t, x, attn_mask=None)`` with ``x`` of shape ``(B, N, D)``; ``attn_mask`` boolean, broadcastable to
    ``(B, heads, N, N)``, ``True`` where attention is allowed (required when ``mask="graph"``).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        form: str = "residual",
        mask: str = "full",
        impl: str = "auto",
        norm_layer: type[nn.Module] = nn.LayerNorm,
        qkv_bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        if heads < 1 or dim % heads:
            raise ValueError(f"dim must be divisible by heads: got dim={dim}, heads={heads}.")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.form = _choice("form", form, FORMS)
        self.mask = _choice("mask", mask, MASKS)
        self.impl = _choice("impl", impl, IMPLS)
        self.dropout = dropout
        self.norm = norm_layer(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, t, x: Tensor, attn_mask: Tensor | None = None, cache: Any = None) -> Tensor:
        out = self.attend(x, attn_mask) if cache is None else self.attend_cached(t, x, cache)
        return out - x if self.form == "laplacian" else out

    def _fused(self) -> bool:
        """Whether to call ``scaled_dot_product_attention``: ``sdpa``, or ``auto`` outside forward-mode AD and
        ``torch.func`` transforms (the fused kernel has no forward-mode derivative; the math path does)."""
        if self.impl == "math":
            return False
        if not _forward_mode():
            return True
        if self.impl == "sdpa":
            raise RuntimeError(
                "AttentionField(impl='sdpa') has no forward-mode derivative (torch.func.jvp, jacfwd, vmap of them or "
                "torch.autograd.forward_ad); use impl='auto' (the default) or impl='math'."
            )
        return False

    def attend_cached(self, t, x: Tensor, cache: Any) -> Tensor:
        """``Attn(LN(x))`` for new positions ``x`` ``(B, n, D)`` that follow the positions whose keys and values
        ``cache`` holds (causal mask only): ``cache.extend(t, k, v)`` appends this evaluation's keys and values and
        returns all of them, ``(B, H, P + n, Dh)`` each (see :mod:`odeformer.generate`). A new position ``i`` attends
        to the ``P`` cached ones and to the new ones up to itself, as it would in the whole sequence."""
        if self.mask != "causal":
            raise ValueError(f"a key/value cache serves causal attention only; this field's mask is {self.mask!r}.")
        q, k, v = self._qkv(x)  # each (B, H, n, Dh)
        k, v = cache.extend(t, k, v)  # (B, H, P + n, Dh)
        out = _attend_new(q, k, v, self._fused(), self.head_dim)
        B, N, D = x.shape
        return self.proj(out.transpose(1, 2).reshape(B, N, D))

    def bind_cache(self, cache: Any) -> tuple[Callable[[Any, Tensor], Tensor], list[nn.Module]]:
        """``(field, modules)``: ``field(t, x)`` computes ``self(t, x, cache=cache)`` by the same operations, with the
        weights read once here instead of through the modules on every call, and ``modules`` are the modules whose
        calls it leaves out. It holds only while none of them has a hook or is in training mode, outside autograd
        and forward-mode AD (what :class:`~odeformer.backbone.Backbone` checks before each pass that uses it); a
        weight replaced after this call (rather than updated in place) is not seen."""
        if self.mask != "causal":
            raise ValueError(f"a key/value cache serves causal attention only; this field's mask is {self.mask!r}.")
        norm, qkv, proj = self.norm, self.qkv, self.proj
        if type(qkv) is not nn.Linear or type(proj) is not nn.Linear:  # another projection: the module path
            return lambda t, x: self(t, x, cache=cache), []
        modules: list[nn.Module] = [self, qkv, proj]
        if type(norm) is nn.LayerNorm:
            shape, norm_weight, norm_bias, eps = norm.normalized_shape, norm.weight, norm.bias, norm.eps
            modules.append(norm)
        elif type(norm) is not nn.Identity:
            shape = None  # a norm of its own: called as a module
        qkv_weight, qkv_bias, proj_weight, proj_bias = qkv.weight, qkv.bias, proj.weight, proj.bias
        dim, heads, head_dim, extend = self.dim, self.heads, self.head_dim, cache.extend
        fused, laplacian, identity = self.impl != "math", self.form == "laplacian", type(norm) is nn.Identity

        def field(t: Any, x: Tensor) -> Tensor:
            if x.dim() != 3 or x.shape[-1] != dim:
                raise ValueError(f"AttentionField expects x of shape (B, N, {dim}), got {tuple(x.shape)}.")
            B, N, D = x.shape
            h = x if identity else F.layer_norm(x, shape, norm_weight, norm_bias, eps) if shape else norm(x)
            q, k, v = F.linear(h, qkv_weight, qkv_bias).view(B, N, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            k, v = extend(t, k, v)
            out = _attend_new(q, k, v, fused, head_dim).transpose(1, 2).reshape(B, N, D)
            out = F.linear(out, proj_weight, proj_bias)
            return out - x if laplacian else out

        return field, modules

    def attend(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """``Attn(LN(x))``: the attention output before the form is applied."""
        q, k, v = self._qkv(x)  # each (B, H, N, Dh)
        if self._fused():
            causal = self.mask == "causal" and attn_mask is None  # the kernel's own causal mask: no N × N tensor
            mask = None if causal else self._mask(x, attn_mask)
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None if causal else mask,
                dropout_p=self.dropout if self.training else 0.0,
                is_causal=causal,
            )
        else:
            out = F.dropout(self._weights(q, k, x, attn_mask), self.dropout, self.training) @ v
        B, N, D = x.shape
        return self.proj(out.transpose(1, 2).reshape(B, N, D))

    def weights(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """The attention matrix ``A(x)``, shape ``(B, heads, N, N)``: row-stochastic, except that a row with nothing
        to attend to (all False in the mask) is zero, as SDPA makes it (instead of the NaN of a softmax over -inf)."""
        q, k, _ = self._qkv(x)
        return self._weights(q, k, x, attn_mask)

    def _weights(self, q: Tensor, k: Tensor, x: Tensor, attn_mask: Tensor | None) -> Tensor:
        """:meth:`weights` from the queries and keys of ``x`` (the math path of :meth:`attend` has them already)."""
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, H, N, N)
        if self.mask == "causal" and attn_mask is None:  # every row keeps its diagonal, so none is empty
            N = x.shape[1]
            above = torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1)  # the keys after each query
            return scores.masked_fill(above, float("-inf")).softmax(dim=-1)
        mask = self._mask(x, attn_mask)
        if mask is None:
            return scores.softmax(dim=-1)
        empty = ~mask.any(-1, keepdim=True)  # rows with no allowed key: a finite softmax, then zeroed (zero gradient)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(empty, 0.0)
        return scores.softmax(dim=-1).masked_fill(empty, 0.0)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"AttentionField expects x of shape (B, N, {self.dim}), got {tuple(x.shape)}.")
        B, N, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(B, N, 3, self.heads, self.head_dim).unbind(2)  # each (B, N, H, Dh)
        # split before the heads' transpose: the backward pass stacks the three gradients straight into the
        # projection's layout, one copy (a permute before the split made it stack, then copy twice)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _mask(self, x: Tensor, attn_mask: Tensor | None) -> Tensor | None:
        N = x.shape[1]
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            raise ValueError(f"attn_mask must be bool (True where a query may attend), got {attn_mask.dtype}.")
        if self.mask == "graph" and attn_mask is None:
            raise ValueError("mask='graph' needs the graph's attention mask at call time: attn_mask=graph_mask(...).")
        if self.mask == "causal":
            causal = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()
            return causal if attn_mask is None else attn_mask & causal
        return attn_mask


def _attend_new(q: Tensor, k: Tensor, v: Tensor, fused: bool, head_dim: int) -> Tensor:
    """New queries ``(B, H, n, Dh)`` attending causally to keys and values ``(B, H, P + n, Dh)`` whose last ``n``
    are theirs: a lone new query sees every key (no mask), else query ``i`` sees the ``P`` earlier ones and the new
    ones up to itself."""
    n, total = q.shape[-2], k.shape[-2]
    mask = None if n == 1 else torch.ones(n, total, dtype=torch.bool, device=q.device).tril(total - n)
    if fused:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))  # (B, H, n, P + n)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


class SimpleAttentionField(nn.Module):
    """DIFFormer's "simple" all-pair attention, linear in the number of tokens.

    Weights ``A_ij ∝ 1 + q̃_i · k̃_j`` with ``q̃, k̃`` the L2-normalised queries and keys (so ``A_ij >= 0`` and rows sum to
    1), computed as ``(Σ_j v_j + q̃_i (K̃ᵀ V)) / (N + q̃_i · Σ_j k̃_j)`` in O(N d²). Forms as :class:`AttentionField`;
    no masks (it is all-pair by construction). Reference: Wu et al., "DIFFormer", ICLR 2023, §3.2.
    """

    def __init__(self, dim: int, heads: int = 1, form: str = "residual", norm_layer: type[nn.Module] = nn.LayerNorm):
        super().__init__()
        if heads < 1 or dim % heads:
            raise ValueError(f"dim must be divisible by heads: got dim={dim}, heads={heads}.")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.form = _choice("form", form, FORMS)
        self.norm = norm_layer(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, t, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        out = self.attend(x, attn_mask)
        return out - x if self.form == "laplacian" else out

    def attend(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        if attn_mask is not None:
            raise ValueError("SimpleAttentionField is all-pair and takes no attn_mask; use AttentionField to mask.")
        B, N, D = x.shape
        q, k, v = self._unit_qkv(x)  # (B, H, N, Dh)
        numerator = v.sum(-2, keepdim=True) + q @ (k.transpose(-2, -1) @ v)  # (B, H, N, Dh)
        denominator = N + q @ k.sum(-2, keepdim=True).transpose(-2, -1)  # (B, H, N, 1)
        out = numerator / denominator
        return self.proj(out.transpose(1, 2).reshape(B, N, D))

    def weights(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """The (dense) attention matrix, for diagnostics and tests: ``(B, heads, N, N)``."""
        q, k, _ = self._unit_qkv(x)
        raw = 1 + q @ k.transpose(-2, -1)
        return raw / raw.sum(-1, keepdim=True)

    def eigenvalues(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """The nonzero eigenvalues of :meth:`weights`, ``(B, heads, Dh + 1)``, without forming the ``N × N`` matrix.

        ``A = D⁻¹ [1, q̃] [1, k̃]ᵀ = U Vᵀ`` has rank at most ``Dh + 1``, and ``U Vᵀ`` shares its nonzero eigenvalues
        with the small ``Vᵀ U``.
        """
        q, k, _ = self._unit_qkv(x)
        ones = torch.ones_like(q[..., :1])
        rows = q.shape[-2] + q @ k.sum(-2, keepdim=True).transpose(-2, -1)  # (B, H, N, 1): row sums of 1 + q̃·k̃
        U, V = torch.cat([ones, q], -1) / rows, torch.cat([ones, k], -1)  # (B, H, N, Dh + 1)
        return torch.linalg.eigvals((V.transpose(-2, -1) @ U).double())

    def _unit_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys L2-normalised, and values, each ``(B, heads, N, Dh)``."""
        B, N, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return F.normalize(q, dim=-1), F.normalize(k, dim=-1), v


class JointIdentity(nn.Module):
    """The identity on a state and its velocity (the FFN's norm in the post-norm layout, where none precedes it)."""

    def __init__(self, dim: int | None = None):
        super().__init__()

    def position(self, x: Tensor) -> Tensor:
        return x

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return x, v

    def stacked(self, x: Tensor, v: Tensor) -> Tensor:
        return torch.stack((x, v))


class FeedForward(nn.Module):
    """The FFN sublayer as a per-token field ``f(x) = MLP(LN(x))``, with its chain-rule path for ``(x, v)``.

    ``forward(t, x)`` is the field; ``joint(x, v)`` returns ``(f(x), J_f(x) v)`` through :class:`JointLayerNorm`
    (``ln_mode`` ``"paper"`` or ``"exact"``) and :class:`JointMLP`. ``norm_layer(dim)`` replaces the LayerNorm
    (:class:`JointIdentity` in the post-norm layout: ``f(x) = MLP(x)``).
    """

    def __init__(
        self,
        dim: int,
        hidden: int | None = None,
        activation: str = "gelu",
        ln_mode: str = "paper",
        dropout: float = 0.0,
        norm_layer: Callable[[int], nn.Module] | None = None,
    ):
        super().__init__()
        self.norm = JointLayerNorm(dim, mode=ln_mode) if norm_layer is None else norm_layer(dim)
        self.mlp = JointMLP(dim, 4 * dim if hidden is None else hidden, activation, dropout)

    def forward(self, t, x: Tensor) -> Tensor:
        return self.mlp.position(self.norm.position(x))

    def joint(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.mlp.stacked(self.norm.stacked(x, v))

    def bind(self) -> tuple[Callable[[Any, Tensor], Tensor], list[nn.Module]]:
        """``(field, modules)``: ``field(t, x)`` computes ``self(t, x)`` and ``field.joint(x, v)`` computes
        :meth:`joint` outside autograd by the same operations (the fused forward passes the joint modules run there),
        with the weights read once here; ``modules`` are the modules whose calls it leaves out. It holds under the
        conditions of :meth:`AttentionField.bind_cache`."""
        norm, mlp = self.norm, self.mlp
        plain = type(mlp) is JointMLP and type(norm) in (JointLayerNorm, JointIdentity)
        if not (plain and type(mlp.fc1) is nn.Linear and type(mlp.fc2) is nn.Linear):
            return self, []  # parts of a user's: the module path
        fc1, fc2, act = mlp.fc1, mlp.fc2, mlp.act
        w1, b1, w2, b2, phi_into = fc1.weight, fc1.bias, fc2.weight, fc2.bias, act.phi_into
        normed = type(norm) is JointLayerNorm
        if normed:
            norm_weight, norm_bias, eps, exact = norm.weight, norm.bias, norm.eps, norm.mode == "exact"

        def field(t: Any, x: Tensor) -> Tensor:
            if normed:
                x = F.layer_norm(x, x.shape[-1:], norm_weight, norm_bias, eps)
            hidden = F.linear(x, w1, b1)
            return F.linear(phi_into(hidden, out=hidden), w2, b2)  # φ in place: nothing differentiates it

        w1t, w2t, prime_times = w1.t(), w2.t(), act.prime_times

        def joint(x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            # the fused joint MLP's forward (odeformer.joint.mlp._joint_mlp), its operations one for one, but with a
            # fresh hidden buffer: at a token's size the shared scratch buffer's lookup costs more than it saves
            xv = _joint_layer_norm(x, v, norm_weight, norm_bias, eps, exact)[0] if normed else torch.stack((x, v))
            pre = xv.reshape(-1, xv.shape[-1]) @ w1t  # (2M, H): the state's rows, then the velocity's
            pre_x, pre_v = pre.chunk(2)
            pre_x.add_(b1)
            hidden = torch.empty_like(pre)
            hidden_x, hidden_v = hidden.chunk(2)
            phi_into(pre_x, out=hidden_x)
            prime_times(pre_v, pre_x, out=hidden_v)
            out = hidden @ w2t
            out_x, out_v = out.view(xv.shape[:-1] + out.shape[-1:]).unbind(0)
            out_x.add_(b2)
            return out_x, out_v

        field.joint = joint
        return field, [self, mlp, fc1, fc2]
