#!/usr/bin/env bash
# One verl update on one GPU in under 10 minutes: the stepwise ADMIRE trainer on verl (admire_step trainer,
# admire_gui agent loop, admire_grpo_step estimator) with tiny-qwen2 (a 4 M-parameter random Qwen2 with the real
# Qwen vocabulary, built offline by `admire models prepare`) on miniwob-smoke, MiniWoB++ in local Chromium.
#
#   scripts/gpu_smoke.sh [--dry-run] [OUT]      (OUT: default .tmp/gpu-verl)
#
# --dry-run prints every command, then runs `admire train --dry-run`: the config is checked by the schema, the
# verl backend's checks and verl's own Hydra composition and validate_config, and verl's command line is
# printed, without preparing a model, starting a browser or touching a GPU: this is what the test suite runs
# on CPU machines. Without it the script needs a CUDA device, Chromium, the dev extra and a rollout engine
# (pip install vllm); SMOKE_TIMEOUT (default 600 s) bounds the training command.
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
    DRY_RUN=1
    shift
fi
OUT="${1:-.tmp/gpu-verl}"
MODEL_DIR="$OUT/tiny-qwen2"
PYTHON="${PYTHON:-python}"
SMOKE_TIMEOUT="${SMOKE_TIMEOUT:-600}"

OVERRIDES=(
    "--config" "configs/verl_stepwise.yaml"
    "trainer.backend=verl"
    "actor_rollout_ref.model.path=$MODEL_DIR"
    "actor_rollout_ref.rollout.n=2"
    "env.suite=miniwob-smoke"
    "env.max_envs=[2]"
    "env.max_steps=2"
    "env.screenshots=false"
    "trainer.total_epochs=1"
    "trainer.tasks_per_epoch=2"
    "trainer.test_freq=-1"
    "trainer.eval_episodes=1"
    "trainer.n_gpus_per_node=1"
    "trainer.logger=[console]"
    "run.dir=$OUT/runs"
    "run.name=tiny-verl"
    "actor_rollout_ref.model.max_new_tokens=64"
    "verl.overrides=['data.max_prompt_length=2048','actor_rollout_ref.rollout.gpu_memory_utilization=0.3','actor_rollout_ref.rollout.agent.num_workers=1']"
)

say() {  # the command as one line to paste: arguments with quotes or spaces in double quotes
    local line="+" arg
    for arg in "$@"; do
        if [[ "$arg" == *[\'\ ]* ]]; then line+=" \"$arg\""; else line+=" $arg"; fi
    done
    printf '%s\n' "$line"
}

if [[ "$DRY_RUN" == 1 ]]; then
    say admire models prepare tiny-qwen2 "$MODEL_DIR"
    say admire train "${OVERRIDES[@]}"
    "$PYTHON" -m admire.cli train "${OVERRIDES[@]}" --dry-run
    exit 0
fi

"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: run with --dry-run')"
mkdir -p "$OUT"
[[ -d "$MODEL_DIR" ]] || "$PYTHON" -m admire.cli models prepare tiny-qwen2 "$MODEL_DIR"
timeout "$SMOKE_TIMEOUT" "$PYTHON" -m admire.cli train "${OVERRIDES[@]}"
