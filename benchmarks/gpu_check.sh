#!/usr/bin/env bash
# One prepared GPU check (at most ~8 minutes on one H200): teacher-forced scoring throughput and MFU
# of Qwen3-0.6B- and Qwen3-8B-shaped models with random weights, the task-vector pass over four
# 0.6B-shaped checkpoints, and probe/tokens/eval on the device. Output shape: docs/gpu.md.
#
#   bash benchmarks/gpu_check.sh                 # on the GPU machine, from the repository root
#   bash benchmarks/gpu_check.sh --models 0.6b   # extra arguments go to benchmarks/gpu_check.py
#   bash benchmarks/gpu_check.sh --tiny          # CPU smoke run of the same code (what CI checks)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
  TOKENIZERS_PARALLELISM=false
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
exec timeout "${GPU_CHECK_TIMEOUT_S:-480}" "$PY" benchmarks/gpu_check.py "$@"
