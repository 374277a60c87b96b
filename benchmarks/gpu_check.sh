#!/usr/bin/env bash
# GPU check (about 5 minutes): DeiT-Ti-sized ViT throughput and peak memory per solver beside the anchors of the same
# size (Hugging Face's ViT where transformers is installed, an nn.TransformerEncoder ViT), the benchmark ratios on the
# GPU, and a short bf16 training run of the main job on CUDA. Uses the machine's own CUDA build of torch and reads the
# project from this checkout (nothing is installed).
#   bash benchmarks/gpu_check.sh [OUT_DIR]
# Then, here: python -m benchmarks.gpu --render OUT_DIR --results docs/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "${1:-${OUT:-gpu_results}}" && cd "${1:-${OUT:-gpu_results}}" && pwd)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
python3 -c "import transformers" 2>/dev/null || echo "transformers is not installed here: the Hugging Face rows are skipped"
timeout 210 python3 -m benchmarks.gpu --json "$out/gpu.json" | tee "$out/gpu.txt"
timeout 260 python3 -m benchmarks.run --quick --device cuda --json "$out/ratios.json" | tee "$out/ratios.txt"
run="$(mktemp -d)"
timeout 120 python3 -m odeformer.train experiment=digits_vit train.device=cuda "train.out_dir=$run" | tee "$out/train.txt"
cp "$run/summary.json" "$out/train_summary.json"
