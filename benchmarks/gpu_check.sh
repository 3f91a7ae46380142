#!/usr/bin/env bash
# A first GPU run that spends its minutes on measurements: one command, offline, inside one 10-minute call.
#
# Here, with network, once:  bash benchmarks/gpu_check.sh --gather [--python-version 3.12]
#   downloads into .whl/ the wheels a GPU image lacks (benchmarks/gpu_wheels.txt): manylinux x86_64, for the
#   image's Python 3.12 unless another version is named; refuses more than 40 MiB.
# On the GPU machine:        bash benchmarks/gpu_check.sh [--deadline 540]       (with .whl/ carried along)
#   installs those wheels with pip --no-index into a folder on PYTHONPATH (an `if-older` wheel only where the
#   image's copy is older), puts ./src on the path (no build step, no start-up hook), then runs the parts in
#   order of value, printing one PASS/FAIL/SKIP line as each ends:
#     1 versions     every dependency inside pyproject's range; the device; a bf16 matmul on it
#     2 configs      training arguments for LoRA, full fine-tuning, SFT and vLLM colocate (constructed only)
#     3 equivalence  tests/test_fast_equivalence.py on the device: the whole bf16 step equals TRL's; a run records it
#     4 grpo_step    GRPO steps at Qwen3-0.6B's shape (weights from its config), 8 prompts x 8 x 256 tokens,
#                    fast path on, then off; s/step, tokens/s, peak memory. The fast path's gate opens for this
#                    device only if part 3 passed here (trainers/fast/verified.py)
#     5 fsdp2        FSDP2 training and its collective final save, where 2 or more GPUs are visible
#     6 demo         the quick demo, if the time left allows (not in a dry run)
# CPU, anywhere:             bash benchmarks/gpu_check.sh --dry-run   (the same parts at tiny shapes; CI runs it
#   without network from an environment holding only what the image holds, plus the gathered wheels)
# Every part's limit is cut to the global deadline (default 540 s, under one 600-s command).
# Output, at most 8 files in $OUT (default outputs/gpu_check): summary.txt (the PASS/FAIL lines, written as
# they come), parts.log (all output), grpo_step.json. Scratch files go to $WORK (default a temporary folder).
# PYTHON picks the interpreter (default python3). Exit status: the number of failed parts.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0 GATHER=0 PY_VERSION=3.12 DEADLINE=540 WHEELS=${WHEELS:-.whl}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --gather) GATHER=1 ;;
    --python-version) PY_VERSION=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --wheels) WHEELS=$2; shift ;;
    *) echo "unknown option $1 (see the comments at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
PYTHON=${PYTHON:-python3}
LIMIT_MIB=40

if [ "$GATHER" = 1 ]; then
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  sed -e 's/#.*//' -e 's/ if-older//' benchmarks/gpu_wheels.txt | grep -v '^\s*$' > "$WHEELS/requirements.txt"
  platforms=()
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
  done
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    "${platforms[@]}" -d "$WHEELS" -r "$WHEELS/requirements.txt" || exit 1
  rm "$WHEELS/requirements.txt"
  size=$(du -sk "$WHEELS" | cut -f1)
  echo "gathered $(ls "$WHEELS" | wc -l) wheels for Python $PY_VERSION into $WHEELS: $((size / 1024)).$(((size % 1024) * 10 / 1024)) MiB"
  [ "$size" -le $((LIMIT_MIB * 1024)) ] || { echo "more than $LIMIT_MIB MiB" >&2; exit 1; }
  exit 0
fi

OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=${WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
: > "$OUT/summary.txt"; : > "$OUT/parts.log"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=offline PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
DEVICE=cuda
if [ "$DRY_RUN" = 1 ]; then
  DEVICE=cpu
  export CUDA_VISIBLE_DEVICES=""
fi

# Installing: the gathered wheels into a folder of their own, this package straight from ./src.
SITE=$WORK/site
if ls "$WHEELS"/*.whl > /dev/null 2>&1; then
  mapfile -t chosen < <("$PYTHON" benchmarks/gpu_check_parts.py wheels benchmarks/gpu_wheels.txt "$WHEELS")
  if [ ${#chosen[@]} -gt 0 ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "${chosen[@]}" || { echo "pip install --no-index of $WHEELS failed" >&2; exit 98; }
  fi
  echo "installed ${#chosen[@]} wheels from $WHEELS into $SITE" | tee -a "$OUT/parts.log"
fi
export PYTHONPATH=$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}

failures=0
EQUIVALENT=0
record() {  # record STATUS NAME DETAIL: one line, printed and kept in summary.txt at once
  echo "$1 $2${3:+ ($3)}" | tee -a "$OUT/summary.txt"
}
time_for() {  # time_for NAME: whether 20 s or more are left before the deadline; SKIP NAME if not
  [ $((DEADLINE - SECONDS - 5)) -ge 20 ] && return 0
  record SKIP "$1" "no time left before the ${DEADLINE}-s deadline"
  return 1
}
part() {  # part NAME LIMIT_S COMMAND...: run under min(limit, time left); PASS/FAIL with its last [tag] line
  local name=$1 limit=$2; shift 2
  time_for "$name" || return 1
  local left=$((DEADLINE - SECONDS - 5))
  [ "$limit" -gt "$left" ] && limit=$left
  local started=$SECONDS log="$WORK/$name.log"
  echo "== $name (limit ${limit}s): $*" >> "$OUT/parts.log"
  timeout --signal=INT --kill-after=10 "$limit" "$@" > "$log" 2>&1
  local code=$?
  grep -v -E "it/s\]|s/it\]" "$log" >> "$OUT/parts.log"
  local said
  said=$(grep -E "^\[[a-z0-9_-]+\]" "$log" | tail -n 3 | tr '\n' ' ' | sed 's/ $//')
  [ -z "$said" ] && said=$(grep -v '^\s*$' "$log" | tail -n 1)
  if [ "$code" -eq 0 ]; then
    record PASS "$name" "$((SECONDS - started))s${said:+; $said}"
  else
    [ "$code" -eq 124 ] && said="timed out after ${limit}s${said:+; $said}"
    record FAIL "$name" "exit $code, $((SECONDS - started))s${said:+; $said}; see parts.log"
    failures=$((failures + 1))
    return 1
  fi
}

# 1-2: what is installed and whether our configs construct on it.
part versions 90 "$PYTHON" benchmarks/gpu_check_parts.py versions $([ "$DRY_RUN" = 1 ] && echo --dry-run)
part configs 90 "$PYTHON" benchmarks/gpu_check_parts.py configs "$WORK/configs"

# 3: the whole-step equivalence on this device; the fast path runs here for it (a device under test).
HELLO_AGENTS_TEST_DEVICE=$DEVICE HELLO_AGENTS_FAST_DEVICES=$DEVICE \
  part equivalence 200 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_fast_equivalence.py -k "bf16 or fast_path_it_took" \
  && EQUIVALENT=1

# 4: throughput at Qwen3-0.6B's shape; the fast path's gate opens for this device only after part 3 passed.
SIZES=(--shape 0.6b --steps 3 --batch-size 8 --num-generations 8 --max-new-tokens 256)
[ "$DRY_RUN" = 1 ] && SIZES=(--shape tiny --steps 2 --batch-size 2 --num-generations 2 --max-new-tokens 8)
GATE=""; [ "$EQUIVALENT" = 1 ] && GATE=$DEVICE
HELLO_AGENTS_FAST_DEVICES=$GATE part grpo_step 240 "$PYTHON" benchmarks/gpu_grpo_step.py --out "$WORK/grpo_step" \
  --json "$OUT/grpo_step.json" "${SIZES[@]}"

# 5: FSDP2 over 2+ GPUs (the dry run: 2 CPU processes, where accelerate runs plain data parallel).
GPUS=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
PROCS=$GPUS; [ "$DRY_RUN" = 1 ] && PROCS=2
if [ "$PROCS" -lt 2 ]; then
  record SKIP fsdp2 "$GPUS GPU visible; FSDP2 needs 2 or more"
elif time_for fsdp2; then
  mkdir -p "$WORK/fsdp"
  "$PYTHON" -m hello_agents_rl.cli tiny-model "$WORK/fsdp/tiny" > /dev/null 2>&1
  cat > "$WORK/fsdp/run.yaml" <<EOF
algorithm: sft
model_name: $WORK/fsdp/tiny
output_dir: $WORK/fsdp/run
dataset: arithmetic
max_samples: 32
max_steps: 2
batch_size: 4
learning_rate: 0.001
use_lora: true
merge_lora: true
logging_steps: 1
save_steps: 100
report_to: none
EOF
  MIXED=bf16 DRY_FLAG=""; [ "$DRY_RUN" = 1 ] && MIXED=no DRY_FLAG=--dry-run
  OMP_NUM_THREADS=1 part fsdp2 150 bash -c "\"$PYTHON\" -m accelerate.commands.launch --config_file configs/accelerate/fsdp2.yaml \
    --num_processes $PROCS --mixed_precision $MIXED --main_process_port 29517 scripts/dist_probe.py \"$WORK/fsdp/dump\" \
    --cli train --config \"$WORK/fsdp/run.yaml\" && \"$PYTHON\" benchmarks/gpu_check_parts.py fsdp \"$WORK/fsdp\" $DRY_FLAG"
fi

# 6: the quick demo, only if the time left allows it.
if [ "$DRY_RUN" = 1 ]; then
  record SKIP demo "dry run: the quick demo takes minutes on a CPU; tests/test_demo.py runs it there"
elif [ $((DEADLINE - SECONDS)) -ge 180 ]; then
  part demo $((DEADLINE - SECONDS - 10)) "$PYTHON" -m hello_agents_rl.cli demo --quick --output-dir "$WORK/demo"
else
  record SKIP demo "$((DEADLINE - SECONDS))s left of the ${DEADLINE}-s deadline; it needs 180"
fi

echo "total ${SECONDS}s; $failures failed; scratch files in $WORK" | tee -a "$OUT/summary.txt"
exit $failures
