#!/usr/bin/env bash
# Every GPU number in one command, under 8 minutes (benchmarks/gpu_run.py: the stages in order of value, each in its
# own process under its own limit within a 450 s budget, the results written after every stage): the environment and
# the fused attention kernels the models' q/k/v get; eager DeiT-Ti bf16 throughput, peak memory and MFU of diffusion,
# Full Wave, Light Wave, Hugging Face's ViT and an nn.TransformerEncoder ViT; host syncs per step; the same compiled
# with CUDA graphs (diffusion, Hugging Face's ViT, Full Wave, nn.TransformerEncoder); the main job's training run on
# CUDA without Hydra; a GPT-2-small-shaped causal LM beside Hugging Face's GPT-2. OUT receives four files: gpu.json,
# gpu_reduce-overhead.json, extras.json, gpu_check.log. Needs only torch with CUDA; reads the project from this folder
# (no install, no .git needed). The commit measured: the second argument, else $ODEFORMER_COMMIT, else git's HEAD
# ("+uncommitted" when tracked files differ from it) where this folder is a git checkout, else "unknown": a lent
# machine's copy has no .git, so pass the full commit (git rev-parse HEAD here).
#   bash benchmarks/gpu_check.sh OUT [COMMIT [BUDGET_S]]    on a GPU machine; BUDGET_S (default 450) the seconds for
#                                                           all stages: a second try in what time is left
#   bash benchmarks/gpu_check.sh --rehearse OUT [COMMIT]    every stage at tiny sizes on the CPU, from a copy of the
#                                                           tree, imports as the GPU machine's image has them, each
#                                                           compiled model through inductor (7½ min on 2 cores)
#   bash benchmarks/gpu_check.sh --render OUT [RESULTS]     the returned files as the GPU block of RESULTS
#                                                           (default docs/RESULTS.md), on any machine
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mode=run
case "${1:-}" in
  --render)
    [ -n "${2:-}" ] || { echo "gpu_check.sh --render OUT [RESULTS]: name the folder the GPU run wrote" >&2; exit 2; }
    exec python3 -m benchmarks.gpu --render "$2" --results "${3:-docs/RESULTS.md}" ;;
  --rehearse) mode=rehearse; shift ;;
  -*) echo "gpu_check.sh: unknown option $1; use OUT [COMMIT [BUDGET_S]], --rehearse OUT [COMMIT]" \
      "or --render OUT [RESULTS]" >&2
    exit 2 ;;
esac
[ -n "${1:-}" ] || { echo "gpu_check.sh: name the folder the results go into (bash benchmarks/gpu_check.sh OUT)" >&2; exit 2; }
# Before anything is written: without a GPU there is nothing to measure, and no OUT folder is left behind.
if [ "$mode" = run ] && ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check.sh: no CUDA device here (torch.cuda.is_available() is False); run it on a machine with a GPU" >&2
  exit 2
fi
commit="${2:-${ODEFORMER_COMMIT:-}}"
# Else git's HEAD, only where this folder is a repository's own top (never an enclosing repository's); the rehearsal
# asks no git, as the lent machine's copy has none.
if [ -z "$commit" ] && [ "$mode" = run ] && [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
  commit="$(git rev-parse HEAD)"
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit+uncommitted"
  fi
fi
commit="${commit:-unknown}"
echo "commit $commit"
if [ "$mode" = rehearse ]; then
  exec python3 -m benchmarks.gpu_run "$1" --commit "$commit" --rehearse
fi
exec python3 -m benchmarks.gpu_run "$1" --commit "$commit" ${3:+--budget "$3"}
