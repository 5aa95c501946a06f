#!/usr/bin/env bash
# The CPU smoke with the CPU key off: verl on one GPU (trainer.device=cuda), vLLM unless ROLLOUT=admire_hf or sglang;
# scripts/verl_smoke.sh says what it runs. Needs a CUDA device, Chromium, the dev extra and, for vLLM,
# `pip install -c constraints/gpu.txt vllm`; well under 10 minutes on one GPU. --dry-run checks it all on a CPU.
#   [ROLLOUT=vllm|admire_hf|sglang] scripts/gpu_smoke.sh [--dry-run] [OUT]      (OUT: default .tmp/cuda-verl)
set -euo pipefail
DEVICE=cuda exec "$(dirname "$0")/verl_smoke.sh" "$@"
