"""Node classification, DIFFormer-style: all-pair attention diffusion mixed with graph propagation."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

import solvers

from ..continuous import ContinuousPreset
from ..fields import AttentionField, SimpleAttentionField, graph_mask
from ..model import Solver, backbone, schedule
from ._common import TaskModel


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


def normalized_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Sparse ``D^{-1/2} (A + I) D^{-1/2}`` of the symmetrised graph, ``(N, N)``."""
    check_edges(edge_index, num_nodes)
    loops = torch.arange(num_nodes, device=edge_index.device)
    both = torch.cat([edge_index, edge_index.flip(0), torch.stack([loops, loops])], dim=1)
    ones = torch.ones(both.shape[1], device=edge_index.device)
    adjacency = torch.sparse_coo_tensor(both, ones, (num_nodes, num_nodes), check_invariants=False).coalesce()
    index = adjacency.indices()
    values = torch.ones_like(adjacency.values())  # duplicate edges count once
    degree = torch.zeros(num_nodes, device=edge_index.device).index_add_(0, index[0], values)
    norm = degree.rsqrt()
    weights = norm[index[0]] * values * norm[index[1]]
    return torch.sparse_coo_tensor(index, weights, (num_nodes, num_nodes), check_invariants=False).coalesce()


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
            self.attention = AttentionField(dim, heads, form="residual", mask=mask, impl="sdpa", norm_layer=nn.Identity)
        else:
            raise ValueError(f"attention must be 'simple', 'softmax' or 'graph_softmax', got {attention!r}.")
        self.form, self.graph_weight = form, graph_weight

    def forward(self, t, h: Tensor, propagation: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        out = (1 - self.graph_weight) * self.attention.attend(h, attn_mask)
        if self.graph_weight:
            out = out + self.graph_weight * torch.sparse.mm(propagation, h[0]).unsqueeze(0)
        return out - h if self.form == "laplacian" else out


def _laplacian_mix(solver: Solver, depth: int):
    """The mix preset gates the wave against this model's own diffusion step ``h + dt a(h)`` (DIFFormer's), not the
    transformer's unit residual step (without LayerNorm, ``h + y`` would double the state every layer)."""
    if isinstance(solver, ContinuousPreset):
        return solver
    graph = {"diffusion_dt": None, "diffusion_shift": 0.0}
    return [
        replace(p, options={**p.options, **graph}) if p.stepper is solvers.Mix else p for p in schedule(solver, depth)
    ]


class NodeClassifier(TaskModel):
    """Input MLP -> ``depth`` steps of graph-mixed attention diffusion -> linear classifier, on one graph.

    ``forward(features (N, F), edge_index (2, E)) -> logits (N, num_classes)``. The attention field is in laplacian
    form by default (``h <- h + dt ((1 - w) A h + w P h - h)`` for the diffusion preset, DIFFormer's update), and the
    mix preset gates the wave against that same diffusion step.
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        depth: int = 4,
        dim: int = 64,
        heads: int = 1,
        dt: float | None = None,
        solver: Solver = "diffusion",
        graph_weight: float = 0.5,
        attention: str = "simple",
        form: str = "laplacian",
        dropout: float = 0.0,
    ):
        super().__init__()
        if not isinstance(dim, int) or heads < 1 or dim % heads:
            raise ValueError(f"dim must be divisible by heads: got dim={dim}, heads={heads}.")
        self.in_features, self.attention = in_features, attention
        self.encoder = nn.Sequential(nn.Dropout(dropout), nn.Linear(in_features, dim), nn.ReLU(), nn.Dropout(dropout))
        self.backbone = backbone(
            depth,
            dim,
            _laplacian_mix(solver, depth),
            make_attention=lambda preset_form: GraphDiffusionField(dim, heads, preset_form, graph_weight, attention),
            make_ffn=None,
            dt=dt,
            form=form,
        )
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, num_classes))

    def forward(self, features: Tensor, edge_index: Tensor, record: list | None = None) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_features:
            raise ValueError(
                f"NodeClassifier expects features of shape (N, {self.in_features}), got {tuple(features.shape)}."
            )
        n = features.shape[0]
        context = {"propagation": normalized_adjacency(edge_index, n).to(features.dtype)}
        if self.attention == "graph_softmax":
            context["attn_mask"] = graph_mask(edge_index, n)
        h = self.backbone(self.encoder(features).unsqueeze(0), record=record, **context)  # (1, N, D)
        return self.classifier(h[0])
