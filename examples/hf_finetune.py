"""Fine-tune a Hugging Face ViT on digits as a plain transformer (diffusion) and as a Full Wave, from the same weights.

The HF model here is built from a config (random init) so that the example runs offline; with a checkpoint of your
own, ``hf = ViTForImageClassification.from_pretrained(path)`` takes its place. ``odeformer.from_hf`` copies its weights
into an odeformer ViT; under ``diffusion`` (dt = 1) the copy computes the HF model's logits (printed: the largest
difference before training), under ``full_wave`` the same weights are integrated as a wave (dt = 0.5, velocity zero
at the start, carried through LayerNorm and the MLP by the chain rule). Both copies train the same number of steps on
the same batches; the script prints each one's test accuracy and time.

    python examples/hf_finetune.py [--steps 300] [--solvers diffusion full_wave light_wave]
"""

import argparse
import sys
import time

import torch
import torch.nn.functional as F
from transformers import ViTConfig, ViTForImageClassification

import odeformer
from odeformer.data import load


def hf_vit() -> ViTForImageClassification:
    """A small HF ViT for 8x8 one-channel images (16 patches + CLS), in eval mode."""
    config = ViTConfig(
        image_size=8,
        patch_size=2,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        num_labels=10,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    return ViTForImageClassification(config).eval()


def train(model, data, steps: int, lr: float) -> tuple[float, float]:
    """AdamW on batches of 64 (the same batches for every model); returns test accuracy and seconds."""
    images, labels = data.splits["train"]
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    generator = torch.Generator().manual_seed(0)
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        index = torch.randint(0, len(labels), (64,), generator=generator)
        loss = F.cross_entropy(model(images[index]), labels[index])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        test_images, test_labels = data.splits["test"]
        accuracy = (model(test_images).argmax(-1) == test_labels).float().mean().item()
    return accuracy, seconds


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--solvers", nargs="+", default=["diffusion", "full_wave"])
    args = parser.parse_args(argv)
    data = load("digits")
    hf = hf_vit()
    probe = data.splits["test"][0][:32]
    with torch.no_grad():
        gap = (odeformer.from_hf(hf)(probe) - hf(probe).logits).abs().max().item()
    print(f"diffusion copy vs the HF model before training: max |logit difference| = {gap:.1e}")
    results = {"initial_gap": gap}
    for solver in args.solvers:
        model = odeformer.from_hf(hf, solver=solver)  # every copy starts from the same HF weights
        accuracy, seconds = train(model, data, args.steps, args.lr)
        results[solver] = {"accuracy": accuracy, "seconds": seconds}
        print(f"{solver:<12} test accuracy {accuracy:.3f}   {seconds:6.1f} s for {args.steps} steps")
    return results


if __name__ == "__main__":
    try:
        sys.exit(0 if main() is not None else 2)
    except KeyboardInterrupt:
        sys.exit("interrupted")  # one line and exit 1, not a traceback
