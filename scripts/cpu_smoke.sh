#!/usr/bin/env bash
# verl end to end on the CPU (trainer.device=cpu, the admire_hf rollout): scripts/verl_smoke.sh says what it runs.
#   scripts/cpu_smoke.sh [--dry-run] [OUT]      (OUT: default .tmp/cpu-verl)
set -euo pipefail
DEVICE=cpu exec "$(dirname "$0")/verl_smoke.sh" "$@"
