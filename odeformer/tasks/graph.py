"""Node classification: all-pair attention diffusion with graph propagation.

:class:`DIFFormer` is DIFFormer-s as its official code runs it on Cora (qitianwu/DIFFormer, ``node classification/``:
``difformer.py``, ``main.py``, ``run.sh``), with the depth loop an integrator: encoder Linear -> LayerNorm -> ReLU ->
dropout; per layer ``h <- Dropout(LN((1 - τ) h + τ P(h)))`` with ``P(h) = Attn(h) + Â h``, i.e. an explicit Euler step
of size τ (their ``alpha``) on the laplacian field ``P(h) - h``, followed by LayerNorm and dropout on the state (a
post-norm map, carried to the velocity by the chain rule for second-order presets); a linear classifier on the last
state. :class:`NodeClassifier` is this library's earlier, looser graph model (a convex mix of attention and graph
propagation, pre-dropout encoder, no per-layer norm).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

import solvers
from solvers import transforms_active

from ..backbone import Fields, SolverSchedule, schedule, transformer
from ..continuous import ContinuousSolver
from ..fields import AttentionField, SimpleAttentionField, graph_mask
from ..joint import JointLayerNorm, JointSequential, vjp_with_graph
from ..layer import JointDropout
from ._common import Footprint, TaskModel, TaskSpec, register


def check_edges(edge_index: Tensor, num_nodes: int) -> None:
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"edge_index must be an integer tensor of shape (2, E), got {tuple(edge_index.shape)} {edge_index.dtype}."
        )
    if torch.compiler.is_compiling():
        return
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(
            f"edge_index refers to nodes outside [0, {num_nodes}): [{int(edge_index.min())}, {int(edge_index.max())}]."
        )


def normalized_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Sparse ``D^{-1/2} (A + I) D^{-1/2}`` of the symmetrised graph, ``(N, N)``, computed in ``dtype``."""
    check_edges(edge_index, num_nodes)
    loops = torch.arange(num_nodes, device=edge_index.device)
    both = torch.cat([edge_index, edge_index.flip(0), torch.stack([loops, loops])], dim=1)
    ones = torch.ones(both.shape[1], device=edge_index.device, dtype=dtype)
    adjacency = torch.sparse_coo_tensor(both, ones, (num_nodes, num_nodes), check_invariants=False).coalesce()
    index = adjacency.indices()
    values = torch.ones_like(adjacency.values())  # duplicate edges count once
    degree = torch.zeros(num_nodes, device=edge_index.device, dtype=dtype).index_add_(0, index[0], values)
    norm = degree.rsqrt()
    weights = norm[index[0]] * values * norm[index[1]]
    return torch.sparse_coo_tensor(index, weights, (num_nodes, num_nodes), check_invariants=False).coalesce()


def _cached_propagation(model: nn.Module, edge_index: Tensor, num_nodes: int, dtype: torch.dtype, layout: str):
    """``model``'s :class:`Propagation` of :func:`normalized_adjacency`, built again only for another graph (another
    ``edge_index`` tensor, or the same one changed in place): a full-batch step on the one graph neither checks its
    edges on the host nor coalesces it again."""
    if torch.compiler.is_compiling():  # traced into the graph instead
        return Propagation.of(normalized_adjacency(edge_index, num_nodes, dtype), layout)
    key = (edge_index.data_ptr(), edge_index._version, tuple(edge_index.shape), num_nodes, dtype, edge_index.device)
    if model._adjacency is None or model._adjacency[0] != key:
        model._adjacency = (key, Propagation.of(normalized_adjacency(edge_index, num_nodes, dtype), layout))
    return model._adjacency[1]


class GraphDiffusionField(nn.Module):
    """``f(h) = (1 - w) Attn(h) + w P h`` (residual form) or that minus ``h`` (laplacian form).

    ``P`` is the normalized adjacency, passed at call time as ``propagation``; ``w = graph_weight``. ``Attn`` is
    all-pair (DIFFormer's simple kernel, ``attention="simple"``), softmax (``"softmax"``), or softmax restricted to
    the graph's edges (``"graph_softmax"``).
    """

    def __init__(self, dim: int, heads: int, form: str, graph_weight: float, attention: str):
        super().__init__()
        if not 0.0 <= graph_weight <= 1.0:
            raise ValueError(f"graph_weight must lie in [0, 1], got {graph_weight}.")
        if attention == "simple":
            self.attention = SimpleAttentionField(dim, heads, form="residual", norm_layer=nn.Identity)
        elif attention in ("softmax", "graph_softmax"):
            mask = "graph" if attention == "graph_softmax" else "full"
            self.attention = AttentionField(dim, heads, form="residual", mask=mask, impl="auto", norm_layer=nn.Identity)
        else:
            raise ValueError(f"attention must be 'simple', 'softmax' or 'graph_softmax', got {attention!r}.")
        self.form, self.graph_weight = form, graph_weight

    def forward(self, t, h: Tensor, propagation: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        out = (1 - self.graph_weight) * self.attention.attend(h, attn_mask)
        if self.graph_weight:
            out = out + self.graph_weight * propagate(propagation, h[0]).unsqueeze(0)
        return out - h if self.form == "laplacian" else out


def _laplacian_mix(solver: SolverSchedule, depth: int):
    """The mix preset gates the wave against this model's own diffusion step ``h + dt a(h)`` (DIFFormer's), not the
    transformer's unit residual step (without LayerNorm, ``h + y`` would double the state every layer)."""
    if isinstance(solver, ContinuousSolver):
        return solver
    graph = {"diffusion_dt": None, "diffusion_shift": 0.0}
    return [
        replace(p, options={**p.options, **graph}) if p.stepper is solvers.Mix else p for p in schedule(solver, depth)
    ]


class NodeClassifier(TaskModel):
    """Input MLP -> ``depth`` steps of graph-mixed attention diffusion -> linear classifier, on one graph.

    ``forward(features (N, F), edge_index (2, E)) -> logits (N, num_classes)``. The attention field is in laplacian
    form by default (``h <- h + dt ((1 - w) A h + w P h - h)`` for the diffusion preset, DIFFormer's update), and the
    mix preset gates the wave against that same diffusion step. The defaults: 8 steps of ``dt=0.2``, width 64, one
    head, dropout 0.5 on the encoder's input and output and before the classifier.
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        depth: int = 8,
        dim: int = 64,
        heads: int = 1,
        dt: float | None = 0.2,
        solver: SolverSchedule = "diffusion",
        graph_weight: float = 0.5,
        attention: str = "simple",
        form: str = "laplacian",
        dropout: float = 0.5,
    ):
        super().__init__()
        if not isinstance(dim, int) or heads < 1 or dim % heads:
            raise ValueError(f"dim must be divisible by heads: got dim={dim}, heads={heads}.")
        self.in_features, self.attention = in_features, attention
        self.encoder = nn.Sequential(nn.Dropout(dropout), nn.Linear(in_features, dim), nn.ReLU(), nn.Dropout(dropout))
        self.backbone = transformer(
            depth,
            dim,
            heads,
            _laplacian_mix(solver, depth),
            dt,
            form=form,
            fields=Fields(lambda preset_form: GraphDiffusionField(dim, heads, preset_form, graph_weight, attention)),
        )
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, num_classes))
        self._adjacency: tuple[Any, Propagation] | None = None  # built once per graph: no host read per step

    def forward(self, features: Tensor, edge_index: Tensor, *, record: list | None = None) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_features:
            raise ValueError(
                f"NodeClassifier expects features of shape (N, {self.in_features}), got {tuple(features.shape)}."
            )
        n = features.shape[0]
        context = {"propagation": _cached_propagation(self, edge_index, n, features.dtype, "coo")}
        if self.attention == "graph_softmax":
            context["attn_mask"] = graph_mask(edge_index, n)
        h = self.backbone(self.encoder(features).unsqueeze(0), record=record, **context)  # (1, N, D)
        return self.classifier(h[0])


class GlobalSimpleAttention(nn.Module):
    """DIFFormer's "simple" kernel as its code computes it (``difformer.py``, ``full_attention_conv``, ``use_weight``
    off): ``q = W_q h``, ``k = W_k h`` (with biases), each divided by the Frobenius norm of the whole ``(N, heads,
    D)`` tensor (not row by row), values the state itself (no value projection), weights
    ``A_ij = (1 + q̃_i · k̃_j) / (N + q̃_i · Σ_j k̃_j)``, heads averaged. Linear in ``N``:
    ``Attn(h)_i = (Σ_j h_j + q̃_i (k̃ᵀ h)) / (N + q̃_i · Σ_j k̃_j)``; the two norms scale the small ``D × D`` product
    ``kᵀ h`` and the ``D``-vector ``Σ_j k_j`` rather than the ``N × D`` queries and keys.
    """

    def __init__(self, dim: int, heads: int = 1):
        super().__init__()
        self.dim, self.heads = dim, heads
        self.query = nn.Linear(dim, dim * heads)
        self.key = nn.Linear(dim, dim * heads)

    def _projections(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``q, k`` as ``(B, H, N, D)`` and ``1 / (‖q‖_F ‖k‖_F)`` as ``(B, 1, 1, 1)``."""
        B, N, D = h.shape
        q, k = self.query(h), self.key(h)  # (B, N, H D)
        scale = 1 / (torch.linalg.vector_norm(q, dim=(1, 2)) * torch.linalg.vector_norm(k, dim=(1, 2)))  # (B,)
        q = q.view(B, N, self.heads, D).transpose(1, 2)  # (B, H, N, D)
        k = k.view(B, N, self.heads, D).transpose(1, 2)
        return q, k, scale.view(B, 1, 1, 1)

    def attend(self, h: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """``Attn(h)``, ``(B, N, D)``, through the Gram matrix ``G = hᵀ h``: with ``q = h W_qᵀ + b_q`` and
        ``k = h W_kᵀ + b_k`` per head, ``kᵀ h = W_k G + b_k (Σ_j h_j)ᵀ``, ``Σ_j k_j = W_k Σ_j h_j + N b_k`` and
        ``‖k‖²_F = Σ_heads tr(W_k G W_kᵀ) + 2 b_kᵀ W_k Σ_j h_j + N ‖b_k‖²`` (likewise ``‖q‖_F``) are ``D × D`` algebra,
        so the queries and keys are never formed: two ``N × D × D`` products (``G`` and ``h`` times the queries'
        matrix) instead of four. The two parts over all ``N`` rows have their backward passes written out
        (:class:`_Gram`, :class:`_HeadRatios`); under ``torch.func`` transforms they are plain operations."""
        if attn_mask is not None:
            raise ValueError("GlobalSimpleAttention is all-pair and takes no attn_mask.")
        B, N, D = h.shape
        H = self.heads
        plain = (
            transforms_active()
        )  # torch.func / forward-mode AD: ordinary operations (the Functions are reverse-mode)
        total = h.sum(1)  # (B, D): Σ_j h_j
        gram = _gram(h) if plain else _Gram.apply(h)  # (B, D, D): hᵀ h
        Wq, Wk = self.query.weight.view(H, D, D), self.key.weight.view(H, D, D)  # (H, D_out, D_in)
        bq, bk = self.query.bias.view(H, D), self.key.bias.view(H, D)

        def projected(W, b):  # W G (B, H, D, D), W Σ_j h_j (B, H, D) and ‖h Wᵀ + b‖²_F over all heads (B,)
            WG, Wt = W @ gram.unsqueeze(1), (W @ total.view(B, 1, D, 1)).squeeze(-1)
            return WG, Wt, (WG * W).sum((-1, -2, -3)) + 2 * (b * Wt).sum((-1, -2)) + N * b.square().sum()

        _, _, query_norm = projected(Wq, bq)
        WkG, Wkt, key_norm = projected(Wk, bk)
        scale = (query_norm * key_norm).rsqrt().view(B, 1, 1, 1)  # 1 / (‖q‖ ‖k‖)
        keys_values = (WkG + bk.view(1, H, D, 1) * total.view(B, 1, 1, D)) * scale  # (B, H, D, D): k̃ᵀ h
        key_sum = (Wkt + N * bk).unsqueeze(-1) * scale  # (B, H, D, 1): Σ_j k̃_j
        # q̃_i M = h_i (W_qᵀ M) + b_q M per head, for M = k̃ᵀ h (numerator, plus Σ_j h_j) and M = Σ k̃ (denominator,
        # plus N): every head's numerator is one column block of h times a D × (H D) matrix, its denominator one
        # column of h times a D × H matrix
        queries = Wq.transpose(-2, -1)  # (H, D_in, D_out)
        numerator = (queries @ keys_values).permute(0, 2, 1, 3).reshape(B, D, H * D)
        numerator_offset = (bq.view(1, H, 1, D) @ keys_values + total.view(B, 1, 1, D)).reshape(B, 1, H * D)
        denominator = (queries @ key_sum).reshape(B, H, D).transpose(1, 2)  # (B, D, H)
        denominator_offset = (bq.view(1, H, 1, D) @ key_sum + N).reshape(B, 1, H)
        terms = (h, numerator, numerator_offset, denominator, denominator_offset)
        return _head_ratios(*terms) if plain else _HeadRatios.apply(*terms)  # (B, N, D)

    def weights(self, h: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """The dense attention matrices, ``(B, heads, N, N)`` (for diagnostics; rows sum to 1)."""
        q, k, scale = self._projections(h)
        raw = 1 + (q @ k.transpose(-2, -1)) * scale
        return raw / raw.sum(-1, keepdim=True)

    def eigenvalues(self, h: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """The nonzero eigenvalues of the head-averaged attention matrix, without forming it: it is ``U Vᵀ`` with
        ``U, V`` of width ``heads (D + 1)``, whose nonzero eigenvalues are those of ``Vᵀ U``: ``(B, 1, heads (D + 1))``.
        """
        q, k, scale = self._projections(h)  # (B, H, N, D)
        ones = torch.ones_like(q[..., :1])
        rows = h.shape[1] + q @ (k.sum(-2, keepdim=True).transpose(-2, -1) * scale)  # (B, H, N, 1)
        U = torch.cat([ones, q * scale], -1) / (rows * self.heads)  # (B, H, N, D + 1)
        V = torch.cat([ones, k], -1)
        U, V = U.transpose(1, 2).flatten(2), V.transpose(1, 2).flatten(2)  # (B, N, H (D + 1))
        return torch.linalg.eigvals((V.transpose(-2, -1) @ U).double()).unsqueeze(1)


def _head_ratios(h: Tensor, M: Tensor, c: Tensor, m: Tensor, c0: Tensor) -> Tensor:
    """``mean over heads of (h M_head + c_head) / (h m_head + c0_head)``: ``h`` ``(B, N, D)``, ``M`` ``(B, D, H D)``,
    ``c`` ``(B, 1, H D)``, ``m`` ``(B, D, H)``, ``c0`` ``(B, 1, H)``; returns ``(B, N, D)``."""
    B, N, _ = h.shape
    heads = m.shape[-1]
    return (torch.baddbmm(c, h, M).view(B, N, heads, -1) / torch.baddbmm(c0, h, m).unsqueeze(-1)).mean(2)


class _HeadRatios(torch.autograd.Function):
    """:func:`_head_ratios` with its backward pass written out: with ``ρ`` the per-head ratios, ``s`` their
    denominators and ``g`` the output's gradient, ``∂/∂num = g / (H s)``, ``∂/∂s = -⟨∂/∂num, ρ⟩`` per row and head;
    then ``∂/∂h = (∂/∂num) Mᵀ + (∂/∂s) mᵀ``, ``∂/∂M = hᵀ ∂/∂num``, ``∂/∂m = hᵀ ∂/∂s`` and the offsets' sums over rows.
    The offsets ride in the products (``baddbmm``) and the division is in place, so there are fewer passes over the
    ``N`` rows than in autograd's chain of broadcasts and divisions. Under ``create_graph=True`` the backward pass
    is autograd's through :func:`_head_ratios` (double backward exact)."""

    @staticmethod
    def forward(ctx, h, M, c, m, c0):
        B, N, _ = h.shape
        denominator = torch.baddbmm(c0, h, m)  # (B, N, H)
        ratios = torch.baddbmm(c, h, M).view(B, N, m.shape[-1], -1).div_(denominator.unsqueeze(-1))  # (B, N, H, D)
        ctx.save_for_backward(h, M, c, m, c0, ratios, denominator)
        return ratios.mean(2)

    @staticmethod
    def backward(ctx, grad):
        h, M, c, m, c0, ratios, denominator = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward pass that can itself be differentiated
            return tuple(vjp_with_graph(_head_ratios, (h, M, c, m, c0), grad))
        B, N, H, D = ratios.shape
        grad_numerator = grad.unsqueeze(2) / (H * denominator).unsqueeze(-1)  # (B, N, H, D)
        grad_denominator = -torch.linalg.vecdot(grad_numerator, ratios)  # (B, N, H)
        grad_numerator = grad_numerator.view(B, N, H * D)
        grad_h = grad_M = grad_c = grad_m = grad_c0 = None
        if ctx.needs_input_grad[0]:
            grad_h = torch.bmm(grad_numerator, M.transpose(1, 2)).baddbmm_(grad_denominator, m.transpose(1, 2))
        rows = h.transpose(1, 2)  # (B, D, N)
        if ctx.needs_input_grad[1]:
            grad_M = rows @ grad_numerator
        if ctx.needs_input_grad[2]:
            grad_c = grad_numerator.sum(1, keepdim=True)
        if ctx.needs_input_grad[3]:
            grad_m = rows @ grad_denominator
        if ctx.needs_input_grad[4]:
            grad_c0 = grad_denominator.sum(1, keepdim=True)
        return grad_h, grad_M, grad_c, grad_m, grad_c0


def _gram(h: Tensor) -> Tensor:
    return h.transpose(1, 2) @ h


class _Gram(torch.autograd.Function):
    """``hᵀ h`` for ``h`` ``(B, N, D)``, with the backward pass one product, ``h (g + gᵀ)``, rather than autograd's
    two (one per factor). Under ``create_graph=True`` the backward pass is autograd's (double backward exact)."""

    @staticmethod
    def forward(ctx, h):
        ctx.save_for_backward(h)
        return _gram(h)

    @staticmethod
    def backward(ctx, grad):
        (h,) = ctx.saved_tensors
        if torch.is_grad_enabled():
            return tuple(vjp_with_graph(_gram, (h,), grad))
        return h @ (grad + grad.transpose(1, 2))


class _SymmetricPropagation(torch.autograd.Function):
    """``Â h`` for a symmetric sparse ``Â``: the backward pass is ``Â g`` too, with no transposition of ``Â`` (which
    PyTorch's sparse backward rebuilds, with a sort, on every call)."""

    @staticmethod
    def forward(ctx, adjacency: Tensor, h: Tensor) -> Tensor:
        ctx.adjacency = adjacency
        return adjacency @ h

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, _SymmetricPropagation.apply(ctx.adjacency, grad)  # linear: differentiable again


class _SparseLinear(torch.autograd.Function):
    """``X Wᵀ + b`` for a fixed sparse ``X`` (bag-of-words node features: 1.3 % nonzero on Cora) with ``Xᵀ`` kept too,
    so neither pass touches the zeros: the weight's gradient is ``(Xᵀ g)ᵀ``; ``X`` gets none."""

    @staticmethod
    def forward(ctx, matrix: Tensor, transposed: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        ctx.transposed = transposed
        return torch.addmm(bias, matrix, weight.t()) if matrix.layout is torch.strided else matrix @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, None, (ctx.transposed @ grad).t(), grad.sum(0)


class Propagation(NamedTuple):
    """A graph's symmetric ``Â`` as the layers propagate with it: the sparse matrix (CSR on CPU, where its products
    are fastest) and its entries ``(rows, cols, values)``, which ``torch.func`` transforms and forward-mode AD use
    (a sparse product has no forward-mode rule there, and a CSR matrix cannot be read inside a transform)."""

    matrix: Tensor
    rows: Tensor
    cols: Tensor
    values: Tensor

    @classmethod
    def of(cls, adjacency: Tensor, layout: str = "csr") -> Propagation:
        """From a coalesced COO ``adjacency`` (:func:`normalized_adjacency`); ``layout="csr"`` keeps it as CSR."""
        rows, cols = adjacency.indices()
        matrix = adjacency
        if layout == "csr":
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
                matrix = adjacency.to_sparse_csr()
        return cls(matrix, rows, cols, adjacency.values())


def propagate(adjacency: Tensor | Propagation, h: Tensor) -> Tensor:
    """``Â h`` for ``h`` of shape ``(N, D)`` and a symmetric sparse ``Â`` (as :func:`normalized_adjacency` builds, or
    a :class:`Propagation` of it, which transforms can differentiate)."""
    if isinstance(adjacency, Propagation):
        if transforms_active():  # the product as a gather and a scatter-add: dense operations every transform knows
            weights = adjacency.values.to(h.dtype)[:, None]
            return torch.zeros_like(h).index_add(0, adjacency.rows, h[adjacency.cols] * weights)
        adjacency = adjacency.matrix
    if adjacency.layout is torch.sparse_coo:
        return torch.sparse.mm(adjacency, h)
    return _SymmetricPropagation.apply(adjacency, h)


class DIFFormerField(nn.Module):
    """``P(h) = Attn(h) + Â h`` (DIFFormer's sum, ``propagation="sum"``) or ``(Attn(h) + Â h) / 2``
    (``"mean"``), in residual form or laplacian form ``P(h) - h``; ``Â`` is passed at call time."""

    def __init__(self, dim: int, heads: int, form: str, propagation: str = "sum"):
        super().__init__()
        if propagation not in ("sum", "mean"):
            raise ValueError(f"propagation must be 'sum' or 'mean', got {propagation!r}.")
        if form not in ("residual", "laplacian"):
            raise ValueError(f"form must be one of residual, laplacian; got {form!r}.")
        self.attention = GlobalSimpleAttention(dim, heads)
        self.form, self.propagation = form, propagation

    def forward(self, t, h: Tensor, propagation: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        out = self.attention.attend(h) + propagate(propagation, h[0]).unsqueeze(0)  # (1, N, D)
        if self.propagation == "mean":
            out = 0.5 * out
        return out - h if self.form == "laplacian" else out


class DIFFormer(TaskModel):
    """DIFFormer-s (see the module docstring), its depth loop driven by any solver.

    ``forward(features (N, F), edge_index (2, E)) -> logits (N, num_classes)``. The defaults are the official Cora
    run's: ``depth=8``, ``dt=0.5`` (their ``alpha``), ``dim=64``, one head, ``dropout=0.2``. ``norm="post"`` puts
    LayerNorm then dropout on the state after every layer (``"none"``: dropout only — an ablation);
    ``propagation="sum"`` is DIFFormer's ``Attn + Â`` (``"mean"``: their average — an ablation); ``layer_dropout``
    (``None``: ``dropout``) is the rate of the dropout on the state after every layer, the encoder's staying
    ``dropout`` (``0``: an ablation); ``ln_mode`` is how a second-order preset's velocity passes the LayerNorm. The
    mix preset gates the wave against this model's own diffusion step ``h + τ (P(h) - h)``.
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        depth: int = 8,
        dim: int = 64,
        heads: int = 1,
        dt: float | None = 0.5,
        solver: SolverSchedule = "diffusion",
        dropout: float = 0.2,
        norm: str = "post",
        propagation: str = "sum",
        ln_mode: str = "paper",
        form: str = "laplacian",
        layer_dropout: float | None = None,
    ):
        super().__init__()
        if norm not in ("post", "none"):
            raise ValueError(f"DIFFormer norm must be 'post' (LayerNorm after every layer) or 'none', got {norm!r}.")
        if isinstance(solver, ContinuousSolver):
            raise ValueError(
                f"DIFFormer normalises and drops out the state after every layer, and the continuous solver "
                f"{solver.name!r} has no layers: pick a stepping solver (e.g. solver=diffusion)."
            )
        self.in_features = in_features
        self.encoder = nn.Sequential(nn.Linear(in_features, dim), nn.LayerNorm(dim), nn.ReLU(), nn.Dropout(dropout))

        state_dropout = dropout if layer_dropout is None else layer_dropout

        def make_norm():
            drop = JointDropout(state_dropout)
            return JointSequential(JointLayerNorm(dim, mode=ln_mode, eps=1e-5), drop) if norm == "post" else drop

        self.backbone = transformer(
            depth,
            dim,
            heads,
            _laplacian_mix(solver, depth),
            dt,
            form=form,
            fields=Fields(
                lambda preset_form: DIFFormerField(dim, heads, preset_form, propagation),
                maps=make_norm,
                final_norm=False,
            ),
        )
        self.classifier = nn.Linear(dim, num_classes)
        self._adjacency: tuple[Any, Tensor] | None = None
        self._features: tuple[Any, tuple[Tensor, Tensor] | None] | None = None

    def propagation(self, edge_index: Tensor, num_nodes: int, dtype: torch.dtype) -> Propagation:
        """``Â = D^{-1/2} (A + I) D^{-1/2}``, built once per graph (the same ``edge_index`` tensor is reused)."""
        # CSR products are several times faster than COO ones on CPU
        layout = "csr" if edge_index.device.type == "cpu" else "coo"
        return _cached_propagation(self, edge_index, num_nodes, dtype, layout)

    def _encode(self, features: Tensor) -> Tensor:
        """The encoder; its first product reads sparse features as sparse (CPU, no gradient wanted for them)."""
        if features.device.type != "cpu" or features.requires_grad or transforms_active():
            return self.encoder(features)
        key = (features.data_ptr(), features._version, tuple(features.shape), features.dtype)
        if self._features is None or self._features[0] != key:
            sparse = None
            if float((features != 0).float().mean()) <= 0.1:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
                    sparse = (features.to_sparse_csr(), features.t().contiguous().to_sparse_csr())
            self._features = (key, sparse)
        if self._features[1] is None:
            return self.encoder(features)
        linear = self.encoder[0]
        h = _SparseLinear.apply(*self._features[1], linear.weight, linear.bias)  # (N, D)
        for module in self.encoder[1:]:
            h = module(h)
        return h

    def forward(self, features: Tensor, edge_index: Tensor, *, record: list | None = None) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_features:
            raise ValueError(
                f"DIFFormer expects features of shape (N, {self.in_features}), got {tuple(features.shape)}."
            )
        n = features.shape[0]
        context = {"propagation": self.propagation(edge_index, n, features.dtype)}
        h = self.backbone(self._encode(features).unsqueeze(0), record=record, **context)  # (1, N, D)
        return self.classifier(h[0])


def _graph_batch(data, model: nn.Module, size: int):
    """The whole graph (``size`` does not apply: node classification is transductive)."""
    features, edges, _ = data.graph
    return (features, edges), {"edge_index": edges}


def _graph_footprint(options: dict, meta: dict, blocks: int, per_block: int) -> Footprint:
    """The graph is one item of ``num_nodes`` tokens: the encoder, ``blocks`` blocks of ``per_block`` parameters, the
    classifier."""
    d, nodes, classes = options["dim"], meta.get("num_nodes", 1), meta.get("num_classes", 1)
    return Footprint(
        parameters=meta.get("in_features", 1) * d + blocks * per_block + d * classes,
        layer=nodes * 6 * d,  # fused attention need not keep the n x n scores: a lower estimate leaves them out
        state=nodes * d,
        head=nodes * classes,
        per_item=False,
    )


def _node_classifier_footprint(options: dict, meta: dict, blocks: int) -> Footprint:
    """Per block an attention's four projections (no FFN)."""
    d = options["dim"]
    return _graph_footprint(options, meta, blocks, 4 * d * d + 8 * d)


def _difformer_footprint(options: dict, meta: dict, blocks: int) -> Footprint:
    """Per block the simple attention's query and key maps (one per head, no value map) and the LayerNorm."""
    d, heads = options["dim"], options.get("heads") or 1
    return _graph_footprint(options, meta, blocks, 2 * d * d * heads + 2 * d * heads + 2 * d)


register(
    TaskSpec(
        "node_classifier",
        NodeClassifier,
        data="graph",
        sizes=("in_features", "num_classes"),
        objective="node_classification",
        diagnostic_batch=_graph_batch,
        first_token="node 0 of the graph",
        default=True,
        footprint=_node_classifier_footprint,
    )
)
register(
    TaskSpec(
        "difformer",
        DIFFormer,
        data="graph",
        sizes=("in_features", "num_classes"),
        objective="node_classification",
        diagnostic_batch=_graph_batch,
        first_token="node 0 of the graph",
        footprint=_difformer_footprint,
    )
)
