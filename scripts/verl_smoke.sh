#!/usr/bin/env bash
# verl, end to end: `admire train` of configs/verl_stepwise.yaml runs `python -m verl.trainer.main_ppo` (Ray, the
# admire_step trainer, the admire_gui agent loop, FSDP2, the rollout) for 2 global steps on MiniWoB++'s
# click-button-sequence (two clicks) through `admire serve`, with one browser killed in the
# middle of an episode; a checkpoint after each step. Then, as if the run had been killed before its step-2
# checkpoint was complete, that checkpoint is removed and the run resumed: verl loads step 1, the milestone bank is
# rolled back to its step-1 version, and the run trains steps 2 and 3.
#
#   DEVICE=cpu|cuda [ROLLOUT=admire_hf|vllm|sglang] scripts/verl_smoke.sh [--dry-run] [OUT]
#
# scripts/cpu_smoke.sh runs it on the CPU (DEVICE=cpu: gloo, the admire_hf rollout on Hugging Face transformers);
# scripts/gpu_smoke.sh on one GPU (DEVICE=cuda, vLLM unless ROLLOUT says otherwise). OUT: default .tmp/DEVICE-verl.
#
# The model is tiny-qwen2 (4 M parameters, the real Qwen vocabulary, random weights) after a supervised warm start
# on the task's oracle demonstrations (`admire models warm-start`): a random model never writes a valid action, and
# the smoke needs successes for the milestone bank. Both are built once and kept in OUT. What it leaves in OUT:
# runs/DEVICE-verl/ (the run: verl/metrics-*.jsonl, milestones.sqlite, verl_bank_versions.json, checkpoints/,
# trajectories/), prepare.log, warm-start.log, train.log, resume.log, serve.log, kill.log; on stderr, one line per
# phase with the seconds spent. tests/integrations/verl/test_cpu_smoke.py runs the CPU smoke and checks all of it;
# docs/scale-out.md quotes its numbers. --dry-run prints the commands and checks the config (no model, browser or
# device needed); SMOKE_TIMEOUT (default 900 s) bounds the warm start and each training command.
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
    DRY_RUN=1
    shift
fi
DEVICE="${DEVICE:-cpu}"
case "$DEVICE" in
    cpu) ROLLOUT="${ROLLOUT:-admire_hf}" ;;
    cuda) ROLLOUT="${ROLLOUT:-vllm}" ;;
    *) echo "DEVICE must be cpu or cuda, got '$DEVICE'" >&2; exit 2 ;;
esac
OUT="${1:-.tmp/$DEVICE-verl}"
PYTHON="${PYTHON:-python}"
PORT="${SMOKE_PORT:-8767}"
SMOKE_TIMEOUT="${SMOKE_TIMEOUT:-900}"
BASE="$OUT/tiny-qwen2"
MODEL="$OUT/tiny-qwen2-warm"
RUN="$OUT/runs/$DEVICE-verl"
URL="http://127.0.0.1:$PORT"
WARM=("--suite" "miniwob/click-button-sequence" "--episodes" "6" "--epochs" "80" "--lr" "0.003" "--batch-size" "4")

OVERRIDES=(
    "--config" "configs/verl_stepwise.yaml"
    "trainer.backend=verl"
    "trainer.device=$DEVICE"
    "actor_rollout_ref.rollout.name=$ROLLOUT"
    "actor_rollout_ref.model.path=$MODEL"
    "actor_rollout_ref.model.max_new_tokens=48"
    "actor_rollout_ref.rollout.n=2"
    "env.suite=miniwob/click-button-sequence"
    "env.src=[remote:$URL]"
    "env.max_envs=[1]"
    "env.max_steps=3"
    "env.screenshots=false"
    "trainer.total_epochs=2"
    "trainer.tasks_per_epoch=2"
    "trainer.eval_every=1"
    "trainer.eval_episodes=1"
    "trainer.n_gpus_per_node=1"
    "trainer.logger=[console]"
    "run.dir=$OUT/runs"
    "run.name=$DEVICE-verl"
    # The killed browser's episode is excluded at once rather than played again, so the run shows one; no
    # validation before the first step, so the browser is killed in a training rollout.
    "verl.overrides=['data.max_prompt_length=1024','++admire.max_reruns=0','trainer.val_before_train=false']"
)

say() {  # the command as one line to paste: arguments with quotes or spaces in double quotes
    local line="+" arg
    for arg in "$@"; do
        if [[ "$arg" == *[\'\ ]* ]]; then line+=" \"$arg\""; else line+=" $arg"; fi
    done
    printf '%s\n' "$line"
}

if [[ "$DRY_RUN" == 1 ]]; then
    say admire models prepare tiny-qwen2 "$BASE"
    say admire models warm-start "$BASE" "$MODEL" "${WARM[@]}"
    say TMPDIR=/tmp/admire-serve.XXXXXX admire serve --num-devices 1 --port "$PORT"
    say "$PYTHON" -m admire.server.faults "$URL" /tmp/admire-serve.XXXXXX
    say admire train "${OVERRIDES[@]}"
    say rm -rf "$RUN/checkpoints/global_step_2"
    say echo 1 ">" "$RUN/checkpoints/latest_checkpointed_iteration.txt"
    say admire train "resume=$RUN" "env.src=[remote:$URL]" trainer.total_epochs=3
    "$PYTHON" -m admire.cli train "${OVERRIDES[@]}" --dry-run
    exit 0
fi

if [[ "$DEVICE" == cuda ]]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: run with --dry-run')"
fi
mkdir -p "$OUT"
START=$SECONDS
phase() {  # one line on stderr per phase, with the seconds since the start (CI shows where the time went)
    printf '[verl smoke] %5d s  %s\n' "$((SECONDS - START))" "$*" >&2
}
[[ -d "$BASE" ]] || "$PYTHON" -m admire.cli models prepare tiny-qwen2 "$BASE" > "$OUT/prepare.log" 2>&1 \
    || { echo "admire models prepare failed; see $OUT/prepare.log" >&2; exit 1; }
phase "tiny-qwen2 ready"
[[ -d "$MODEL" ]] || timeout --kill-after=60 "$SMOKE_TIMEOUT" \
    "$PYTHON" -m admire.cli models warm-start "$BASE" "$MODEL" "${WARM[@]}" > "$OUT/warm-start.log" 2>&1 \
    || { echo "admire models warm-start failed; see $OUT/warm-start.log" >&2; exit 1; }
phase "warm start done"
rm -rf "$RUN"
# Short folders under /tmp: the server's browsers (Chromium refuses a long scratch path) and Ray's session (its
# socket paths may not exceed 107 characters, and OUT may be deep). Both go when the script ends.
SERVE_TMP="$(mktemp -d /tmp/admire-serve.XXXXXX)"
export RAY_TMPDIR="$(mktemp -d /tmp/admire-ray.XXXXXX)"

TMPDIR="$SERVE_TMP" "$PYTHON" -m admire.cli serve --num-devices 1 --port "$PORT" --no-dashboard \
    > "$OUT/serve.log" 2>&1 &
SERVE=$!
KILLER=""
cleanup() {
    [[ -n "$KILLER" ]] && kill "$KILLER" 2>/dev/null || true
    kill "$SERVE" 2>/dev/null || true
    wait "$SERVE" 2>/dev/null || true
    rm -rf "$SERVE_TMP" "$RAY_TMPDIR"
}
trap cleanup EXIT
for _ in $(seq 120); do
    if "$PYTHON" -c "import urllib.request; urllib.request.urlopen('$URL/health', timeout=2)" 2>/dev/null; then break; fi
    kill -0 "$SERVE" 2>/dev/null || { cat "$OUT/serve.log" >&2; exit 1; }
    sleep 1
done
phase "admire serve answers"

"$PYTHON" -m admire.server.faults "$URL" "$SERVE_TMP" --timeout "$SMOKE_TIMEOUT" \
    > "$OUT/kill.log" 2>&1 &
KILLER=$!
timeout --kill-after=60 "$SMOKE_TIMEOUT" "$PYTHON" -m admire.cli train "${OVERRIDES[@]}" > "$OUT/train.log" 2>&1 \
    || { echo "admire train failed; see $OUT/train.log" >&2; exit 1; }
if kill -0 "$KILLER" 2>/dev/null || ! wait "$KILLER"; then  # still waiting, or gave up: nothing was killed
    echo "no browser was killed during the run; see $OUT/kill.log" >&2
    exit 1
fi
KILLER=""
phase "2 global steps trained"
rm -rf "$RUN/checkpoints/global_step_2"
echo 1 > "$RUN/checkpoints/latest_checkpointed_iteration.txt"
timeout --kill-after=60 "$SMOKE_TIMEOUT" "$PYTHON" -m admire.cli train "resume=$RUN" "env.src=[remote:$URL]" trainer.total_epochs=3 > "$OUT/resume.log" 2>&1 \
    || { echo "the resume failed; see $OUT/resume.log" >&2; exit 1; }
phase "resumed from step 1 and trained steps 2 and 3"
echo "verl smoke passed on $DEVICE: $RUN"
