"""GRPO step throughput and peak memory on a Qwen3-0.6B-shaped model with random weights (no download).

    python benchmarks/gpu_grpo_step.py --out outputs/gpu_grpo            # on a GPU: bf16, the 0.6B shape
    python benchmarks/gpu_grpo_step.py --out /tmp/g --shape tiny --steps 2   # a CPU dry run of the script

The model has Qwen3-0.6B's layers (28 x 1024 wide, 16 query / 8 KV heads, MLP 3072) but the tiny
model's tokenizer, so its vocabulary is that tokenizer's (~320 tokens, not 151,936): the embedding and
LM head are tiny and the numbers measure the transformer blocks. Random weights rarely emit EOS, so
every completion runs to max_new_tokens: a worst case for generation time. Each setting (the fast path on,
then off: HELLO_AGENTS_FAST) runs `steps` GRPO steps through RLTrainingTool; the first step is warm-up. The
"on" row says whether the fast path really ran (its sampler) or why not: on a device that is not verified
(trainers/fast/verified.py) it stays off unless HELLO_AGENTS_FAST_DEVICES names the device, which
benchmarks/gpu_check.sh does only after the equivalence test passed there.
Prints one line per setting and writes results.json under --out (and to --json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

SHAPES = {
    # Qwen/Qwen3-0.6B's config.json, minus the vocabulary
    "0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0, max_position_embeddings=40960),
    "tiny": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, rope_theta=1_000_000.0, max_position_embeddings=1024),
}


def build_model(out: Path, shape: str) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from hello_agents_rl.models import build_tiny_model, load_tokenizer

    tokenizer = load_tokenizer(str(build_tiny_model(out / "tiny")))
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in
           (("bos", "<|endoftext|>"), ("eos", "<|im_end|>"), ("pad", "<|endoftext|>"))}
    config = Qwen3Config(vocab_size=len(tokenizer), tie_word_embeddings=True, bos_token_id=ids["bos"],
                         eos_token_id=ids["eos"], pad_token_id=ids["pad"], **SHAPES[shape])
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = ids["eos"], ids["pad"]
    folder = out / f"qwen3-{shape}-random"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    print(f"model: Qwen3 {shape} shape, {model.num_parameters() / 1e6:.0f}M parameters "
          f"(vocabulary {len(tokenizer)}), random weights -> {folder}", flush=True)
    return folder


def run_setting(model: Path, out: Path, args: argparse.Namespace, fast: bool) -> dict[str, Any]:
    from hello_agents_rl.interfaces.tool import RLTrainingTool  # not through the start-up hook: it may be absent
    from hello_agents_rl.trainers.fast.verified import ENV_SWITCH

    os.environ[ENV_SWITCH] = "1" if fast else "0"  # read at each trainer's start
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": str(model), "dataset": "arithmetic",
        "output_dir": str(out), "overwrite_output_dir": True, "max_samples": args.batch_size * args.steps,
        "max_steps": args.steps, "batch_size": args.batch_size, "num_generations": args.num_generations,
        "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "learning_rate": 1e-5, "warmup_ratio": 0.0,
        "gradient_checkpointing": args.gradient_checkpointing, "use_lora": args.lora, "reward_type": "length_penalty",
        "reward_config": {"target_length": 40, "penalty_weight": 1.0}, "logging_steps": 1,
        "save_steps": 10_000, "report_to": "none", "oom_backoff": False,
    })
    wall = time.perf_counter() - started
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in logs if "step_time" in m]
    steady = steps[1:] or steps  # the first step pays for warm-up (kernels, allocator)
    step_time = statistics.median(m["step_time"] for m in steady)
    completions = args.batch_size * args.num_generations
    mean_length = statistics.mean(m.get("completions/mean_length", args.max_new_tokens) for m in steady)
    record = result.get("fast_path") or {}
    off = sorted({f"{f['part']}: {f['reason']}" for f in record.get("fallbacks", [])})
    return {
        "fast_path_requested": fast,
        "fast_path_sampler_ran": bool(record.get("sampler")),
        "fast_path_fallbacks": off,
        "gradient_checkpointing": args.gradient_checkpointing,
        "use_lora": args.lora,
        "status": result["status"],
        "num_steps": result["num_steps"],
        "completions_per_step": completions,
        "step_time_s": round(step_time, 3),
        "completions_per_s": round(completions / step_time, 2),
        "tokens_per_s": round(completions * mean_length / step_time, 1),
        "mean_completion_tokens": round(mean_length, 1),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None,
        "wall_s": round(wall, 1),
        "dtype": str(next(iter(_dtypes(out)), "unknown")),
    }


def _dtypes(out: Path) -> list[str]:
    config = out / "model" / "config.json"
    return [json.loads(config.read_text()).get("dtype", "?")] if config.is_file() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/gpu_grpo")
    parser.add_argument("--shape", choices=list(SHAPES), default="0.6b")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per setting (the first is warm-up)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--lora", action=argparse.BooleanOptionalAction, default=False,
                        help="LoRA instead of full fine-tuning")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device: running on CPU in fp32 (a dry run of the script, not a benchmark)", flush=True)
    else:
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    model = build_model(out, args.shape)
    rows = []
    for fast in (True, False):
        row = run_setting(model, out / f"run-fast-{'on' if fast else 'off'}", args, fast)
        rows.append(row)
        ran = "ran" if row["fast_path_sampler_ran"] else "did not run"
        why = f" ({'; '.join(row['fast_path_fallbacks'])})" if row["fast_path_fallbacks"] else ""
        print(f"[grpo-step] fast path {'on ' if fast else 'off'} ({ran}{why if fast else ''}) | "
              f"{row['completions_per_step']} completions x {row['mean_completion_tokens']:.0f} tokens | "
              f"{row['step_time_s']:.2f} s/step | {row['completions_per_s']:.1f} completions/s | "
              f"{row['tokens_per_s']:.0f} tokens/s | peak GPU memory {row['peak_gpu_memory_gib']} GiB", flush=True)
    report = json.dumps({"shape": args.shape, "device": _device(), "settings": rows}, indent=2)
    (out / "results.json").write_text(report)
    if args.json:
        Path(args.json).write_text(report)
    return 0 if all(r["status"] == "completed" for r in rows) else 1


def _device() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    sys.exit(main())
