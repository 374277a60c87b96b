"""The loss falls when each task model trains a few dozen steps on synthetic data (diffusion and a wave preset)."""

import pytest
import torch
import torch.nn.functional as F

from odeformer import CausalLM, MaskedLM, NodeClassifier, ViT
from odeformer.data.synthetic import counting_sequences, marker_sentences, quadrant_images, stochastic_block_graph


def _train(model, loss_fn, steps=40, lr=3e-3):
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = loss_fn()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


def _falls(losses):
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.6 * first, f"loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize("solver", ["diffusion", "full_wave"])
def test_vit_learns_quadrants(solver):
    torch.manual_seed(0)
    images, labels = quadrant_images(64)
    model = ViT(image_size=8, patch_size=4, num_classes=4, depth=2, dim=32, heads=2, solver=solver)
    _falls(_train(model, lambda: F.cross_entropy(model(images), labels)))


@pytest.mark.parametrize("solver", ["diffusion", "full_wave"])
def test_causal_lm_learns_to_count(solver):
    torch.manual_seed(0)
    tokens = counting_sequences(32, 12, 11)
    model = CausalLM(vocab_size=11, max_len=11, depth=2, dim=32, heads=2, solver=solver)
    _falls(_train(model, lambda: F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())))


@pytest.mark.parametrize("solver", ["diffusion", "full_wave"])
def test_masked_lm_classifies_markers(solver):
    torch.manual_seed(0)
    tokens, labels = marker_sentences(64, 10, 20)
    model = MaskedLM(vocab_size=20, max_len=10, depth=2, dim=32, heads=2, solver=solver, num_classes=2)
    _falls(_train(model, lambda: F.cross_entropy(model.classify(tokens), labels), steps=60))


@pytest.mark.parametrize("solver", ["diffusion", "full_wave"])
def test_node_classifier_learns_blocks(solver):
    torch.manual_seed(0)
    features, edges, labels = stochastic_block_graph()
    model = NodeClassifier(16, 3, depth=3, dim=32, solver=solver, dt=0.2, dropout=0.0)
    _falls(_train(model, lambda: F.cross_entropy(model(features, edges), labels)))
