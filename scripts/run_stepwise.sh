#!/usr/bin/env bash
# ADMIRE stepwise on verl + Ray on one node: Qwen2.5-VL-3B-Instruct (configs/verl_stepwise.yaml), GPUS GPUs
# (default 8), MiniWoB++ devices served by `admire serve` and reached by URL (env.src=[remote:URL]).
#
#   scripts/run_stepwise.sh [--dry-run] [key=value ...]     (extra overrides go to admire train)
#
# Environment:
#   MODEL        local model directory (default models/Qwen2.5-VL-3B-Instruct; nothing is downloaded)
#   GPUS         GPUs of this node (default 8)
#   ENV_URL      an env server already running (e.g. http://browser-host:8765); unset: this script starts
#                `admire serve` on 127.0.0.1:ENV_PORT (default 8765) with ENV_DEVICES browsers (default 32)
#                and stops it at the end
#   AGENT_WORKERS  verl's agent-loop worker processes (default 8); each leases ENV_DEVICES/AGENT_WORKERS devices
#   PYTHON       the interpreter with admire installed (default python)
# --dry-run prints every command, then runs `admire train --dry-run` (all checks, verl's command printed; no GPU,
# no server, nothing written). Needs: the dev extra, a rollout engine (pip install vllm), Chromium for the server.
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
    DRY_RUN=1
    shift
fi
MODEL="${MODEL:-models/Qwen2.5-VL-3B-Instruct}"
GPUS="${GPUS:-8}"
ENV_PORT="${ENV_PORT:-8765}"
ENV_DEVICES="${ENV_DEVICES:-32}"
AGENT_WORKERS="${AGENT_WORKERS:-8}"
PYTHON="${PYTHON:-python}"
URL="${ENV_URL:-http://127.0.0.1:$ENV_PORT}"
PER_WORKER=$(( ENV_DEVICES / AGENT_WORKERS > 0 ? ENV_DEVICES / AGENT_WORKERS : 1 ))

SERVE=(serve --backend miniwob --num-devices "$ENV_DEVICES" --screenshots --port "$ENV_PORT")
TRAIN=(
    train --config configs/verl_stepwise.yaml
    "trainer.backend=verl"
    "actor_rollout_ref.model.path=$MODEL"
    "trainer.n_gpus_per_node=$GPUS"
    "env.src=[remote:$URL]"
    "env.max_envs=[$PER_WORKER]"
    "verl.overrides=['actor_rollout_ref.rollout.gpu_memory_utilization=0.6','actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4','actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8','actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8','actor_rollout_ref.rollout.agent.num_workers=$AGENT_WORKERS']"
    "$@"
)

say() {  # the command as one line to paste: arguments with quotes or spaces in double quotes
    local line="+" arg
    for arg in "$@"; do
        if [[ "$arg" == *[\'\ ]* ]]; then line+=" \"$arg\""; else line+=" $arg"; fi
    done
    printf '%s\n' "$line"
}

if [[ "$DRY_RUN" == 1 ]]; then
    [[ -n "${ENV_URL:-}" ]] || say admire "${SERVE[@]}" "&"
    say admire "${TRAIN[@]}"
    "$PYTHON" -m admire.cli "${TRAIN[@]}" --dry-run
    exit 0
fi

if [[ -z "${ENV_URL:-}" ]]; then
    "$PYTHON" -m admire.cli "${SERVE[@]}" &
    SERVER=$!
    trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
    READY=0
    for _ in $(seq 120); do  # the server answers once it is up
        if "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" \
            "$URL" 2>/dev/null; then READY=1; break; fi
        sleep 1
    done
    [[ "$READY" == 1 ]] || { echo "run_stepwise.sh: admire serve did not answer on $URL within 120 s" >&2; exit 1; }
fi
"$PYTHON" -m admire.cli "${TRAIN[@]}"
