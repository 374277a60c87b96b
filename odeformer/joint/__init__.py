"""Layers that carry a state and its velocity together, ``(x, v) -> (g(x), J_g(x) v)``, by the chain rule.

In a wave block the state ``x`` passes through per-token maps (LayerNorm, the FFN) between attention steps; the
velocity is a tangent vector at ``x`` and is carried by the map's Jacobian. Each module here returns
``(x_out, v_out)`` from ``forward(x, v)`` and the plain map of the state from ``position(x)``:

- :class:`JointLayerNorm` (:mod:`.layer_norm`): ``x -> γ ⊙ x̂ + β`` with ``x̂ = (x - mean x) / s``,
  ``s = sqrt(var x + eps)``; the velocity either by the Wavy Transformer's rule ``γ ⊙ v / s`` (``mode="paper"``: the
  JVP with mean and variance frozen) or by the exact JVP ``γ ⊙ [(v - mean v) / s - x̂ · mean(x̂ ⊙ v) / s]``
  (``mode="exact"``).
- :class:`JointMLP` (:mod:`.mlp`): ``x -> φ(x W₁ᵀ + b₁) W₂ᵀ + b₂``; velocity ``(φ'(x W₁ᵀ + b₁) ⊙ v W₁ᵀ) W₂ᵀ``, exact
  for the activations in :data:`ACTIVATIONS` (:mod:`.activations`). x and v go through each weight in one matrix
  product, and ``φ'`` is computed from the state's pre-activation.
- :class:`JointJVP` (:mod:`.generic`): any module, velocity by ``torch.func.jvp``: the oracle for the tests and the
  fallback for modules without a hand-written rule. :class:`JointSequential` chains joint modules.

Derivatives of these layers. Outside function transforms, LayerNorm and the hidden layer run as fused autograd
Functions with hand-written first-order backward passes. Differentiating those backward passes again
(``create_graph=True``: Hessian-vector products, gradient penalties) recomputes the layer from its plain formula and
lets autograd differentiate that (:func:`vjp_with_graph`), so second and higher derivatives are exact. Under a
``torch.func`` transform (``jvp``, ``vmap``, ``grad``, ``jacrev``, ``jacfwd``, ``hessian``, nested in any order) or a
forward-mode AD level (``torch.autograd.forward_ad.dual_level``) the modules run the same maths in ordinary
differentiable operations instead of the Functions, so every transform composes with them.
"""

from .activations import ACTIVATIONS, Activation, activation
from .double_backward import vjp_with_graph
from .generic import JointJVP, JointSequential
from .layer_norm import JointLayerNorm
from .layer_norm import _JointLayerNorm as _JointLayerNorm  # the fused Functions, for tests against their formulas
from .mlp import JointMLP, release_workspace
from .mlp import _JointMLP as _JointMLP

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "JointJVP",
    "JointLayerNorm",
    "JointMLP",
    "JointSequential",
    "activation",
    "release_workspace",
    "vjp_with_graph",
]
