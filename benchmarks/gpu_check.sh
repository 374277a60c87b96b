#!/usr/bin/env bash
# GPU check (about 7 minutes on an H200; each step has its own time limit, 9.5 minutes in all): DeiT-Ti-sized ViT
# throughput, MFU and peak memory per solver beside the anchors of the same size (Hugging Face's ViT where
# transformers is installed, an nn.TransformerEncoder ViT), first eager and then every model compiled with CUDA graphs
# (torch.compile mode reduce-overhead; models whose compilation would start after 120 s are skipped and listed), the
# benchmark ratios on the GPU, and a short bf16 training run of the main job on CUDA. The commit measured
# (git rev-parse HEAD, "+uncommitted" when tracked files differ from it; or $ODEFORMER_COMMIT, for a copy of the tree
# without .git) goes into OUT/commit.txt and the JSON. A step that fails or runs out of time is reported at the end
# and does not stop the others. Uses the machine's own CUDA build of torch and reads the project from this checkout
# (nothing is installed).
#   bash benchmarks/gpu_check.sh [OUT_DIR]
# Then, here: python -m benchmarks.gpu --render OUT_DIR --results docs/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/.."
# Before anything is written: without a GPU there is nothing to measure, and no OUT folder is left behind.
if ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check.sh: no CUDA device here (torch.cuda.is_available() is False); run it on a machine with a GPU" >&2
  exit 2
fi
out="$(mkdir -p "${1:-${OUT:-gpu_results}}" && cd "${1:-${OUT:-gpu_results}}" && pwd)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ -z "${ODEFORMER_COMMIT:-}" ]; then
  ODEFORMER_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  if [ "$ODEFORMER_COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    ODEFORMER_COMMIT="$ODEFORMER_COMMIT+uncommitted"
  fi
fi
export ODEFORMER_COMMIT
echo "$ODEFORMER_COMMIT" >"$out/commit.txt"
echo "commit $ODEFORMER_COMMIT"
python3 -c "import torch; print(torch.cuda.get_device_name())"
python3 -c "import transformers" 2>/dev/null || echo "transformers is not installed here: the Hugging Face rows are skipped"

failed=()
step() { # step SECONDS NAME COMMAND...: run COMMAND under a time limit, its output also in OUT/NAME.txt
  local limit=$1 name=$2 rc=0
  shift 2
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.txt" || rc=$?
  if [ "$rc" -eq 124 ]; then
    failed+=("$name (over its $limit s)")
  elif [ "$rc" -ne 0 ]; then
    failed+=("$name (exit $rc)")
  fi
  return 0
}
step 130 gpu python3 -m benchmarks.gpu --json "$out/gpu.json"
step 250 gpu_reduce-overhead python3 -m benchmarks.gpu --compile-mode reduce-overhead --no-memory --time-limit 120 \
  --json "$out/gpu_reduce-overhead.json"
step 120 ratios python3 -m benchmarks.run --quick --device cuda --json "$out/ratios.json"
run="$(mktemp -d)"
step 70 train python3 -m odeformer.app.train experiment=digits_vit train.device=cuda "train.out_dir=$run"
if [ -f "$run/summary.json" ]; then
  cp "$run/summary.json" "$out/train_summary.json"
fi
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "all steps done: $out"
