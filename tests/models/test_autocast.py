"""Mixed precision (the training loop's bf16 autocast on CUDA; checked here with CPU bf16 autocast): every preset
trains, the fused Full Wave backward matches autograd, and the reversible backward replays the forward's autocast."""

import pytest
import torch
import torch.nn.functional as F

import odeformer
from odeformer.joint import JointMLP, _JointMLP


def _bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


@pytest.mark.parametrize("solver", sorted(odeformer.solver_names("discrete")))
def test_every_preset_takes_a_bf16_training_step(solver):
    torch.manual_seed(0)
    model = odeformer.ViT(image_size=8, patch_size=4, depth=3, dim=16, heads=2, solver=solver)
    with _bf16():
        loss = F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32, name
        assert torch.isfinite(p.grad).all(), name


def test_fused_full_wave_hidden_matches_autograd_under_autocast():
    torch.manual_seed(0)
    mlp = JointMLP(16, 64)
    x, v = torch.randn(4, 5, 16), torch.randn(4, 5, 16)

    def grads(fused: bool):
        mlp.zero_grad()
        with _bf16():
            if fused:
                weights = (mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias)
                out_x, out_v = _JointMLP.apply(torch.stack((x, v)), *weights, mlp.act)
            else:  # the same formulas left to autograd
                pre = F.linear(torch.stack((x, v)), mlp.fc1.weight)
                pre_x = pre[0] + mlp.fc1.bias
                hidden = torch.stack((mlp.act.phi(pre_x), mlp.act.prime_times(pre[1], pre_x)))
                out = F.linear(hidden, mlp.fc2.weight)
                out_x, out_v = out[0] + mlp.fc2.bias, out[1]
            loss = out_x.float().sin().sum() + out_v.float().cos().sum()
        loss.backward()
        return [p.grad.clone() for p in mlp.parameters()]

    for fused, plain in zip(grads(True), grads(False)):
        # both sides round products to bf16 (8 bits: relative steps of 2^-8 ≈ 4e-3), in a different order
        assert (fused - plain).norm() <= 1e-2 * plain.norm()


def test_reversible_backward_replays_the_forward_autocast():
    def grads(reversible: bool):
        torch.manual_seed(0)
        model = odeformer.ViT(image_size=16, patch_size=4, depth=6, dim=32, heads=2, solver="reversible")
        model.backbone.reversible = reversible
        with _bf16():
            loss = model(torch.randn(3, 1, 16, 16)).float().square().sum()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    # Rebuilding states with float32 forces instead of the forward's bf16 ones is off by about 7e-2 here; replaying
    # the same autocast leaves only the float32 round-off of the inverse steps.
    for reversible, plain in zip(grads(True), grads(False)):
        assert (reversible - plain).norm() <= 1e-5 * plain.norm()
