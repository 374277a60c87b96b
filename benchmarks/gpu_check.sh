#!/usr/bin/env bash
# GPU check (under 5 minutes): DeiT-Ti-sized ViT throughput and peak memory per solver, plus the benchmark ratios on
# the GPU. Uses the machine's own CUDA build of torch; installs the project without touching it.
#   bash benchmarks/gpu_check.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu_results}}"
mkdir -p "$out"
python3 -m pip install --quiet --no-deps -e . 2>/dev/null || true
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu --steps 20 --json "$out/gpu.json" | tee "$out/gpu.txt"
PYTHONUNBUFFERED=1 python3 -m benchmarks.run --quick --device cuda --json "$out/ratios.json" | tee "$out/ratios.txt"
