"""GRPO throughput and learning: our tool vs plain TRL GRPOTrainer, same workload, side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/grpo_throughput.py            # both workloads, 3 seeds
    .venv/bin/python benchmarks/grpo_throughput.py --workloads small --repeats 2 --with-tuned

Each run is its own subprocess (OMP_NUM_THREADS=1, offline); the variants alternate within every repeat,
and every repeat uses a new seed shared by the variants. Variants:

* ours  -- `RLTrainingTool().run({...})`, defaults except the workload's keys;
* trl   -- plain `trl.GRPOTrainer` set up as TRL's docs show it (GRPOConfig + LoraConfig + a reward
           function), the learning knobs set equal to ours, everything else at TRL's defaults;
* trl_tuned (--with-tuned) -- plain TRL again, plus the two config choices our tool makes for CPU
           (gradient_checkpointing=False, bf16=False): separates "better config" from "better code".

Shared by all: the same SFT'd tiny Qwen3 (built and SFT'd once on the arithmetic task, cached in
--workdir), the same prompts (seeded), prompts x generations per step, max_new_tokens, KL coefficient,
LoRA (r16, alpha 32, dropout 0.05, all-linear), learning rate, temperature, advantage scaling.

Measured per run: train() wall and CPU seconds (the training loop only: no loading, no saving),
completions/s, generated tokens/s, seconds per optimizer step, peak RSS of the process after training,
the mean reward over the run, and greedy held-out accuracy of the final policy (250 test questions).
Ratios are ours / plain TRL over the per-workload medians.
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
from pathlib import Path
from typing import Any

import roofline
from child_runs import median, report, result_of
from phase_timer import phase_split, timed_trainer

HERE = Path(__file__).resolve().parent

WORKLOADS: dict[str, dict[str, Any]] = {
    # the shape of the book's first example: 4 prompts x 4 generations, KL 0.05, LoRA r16; 32 new tokens
    "small": {"prompts": 4, "generations": 4, "max_new_tokens": 32, "kl": 0.05, "steps": 40},
    "large": {"prompts": 8, "generations": 8, "max_new_tokens": 128, "kl": 0.05, "steps": 16},
}
LEARNING = {"learning_rate": 3e-4, "temperature": 1.0, "scale_rewards": "none", "lora_r": 16, "lora_alpha": 32}
SFT_RECIPE = {"steps": 600, "batch_size": 32, "learning_rate": 2e-3, "carry_error": 0.7}


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               WANDB_MODE="disabled", PYTHONWARNINGS="ignore")
    env.pop("WANDB_PROJECT", None)
    return env


# --- the starting model ------------------------------------------------------------------------------------


def prepare(workdir: Path) -> str:
    """The tiny Qwen3 after a short SFT on the arithmetic task (the demo's recipe): cached."""
    sft_dir = workdir / "sft"
    model = sft_dir / "model"
    if (model / "config.json").is_file():
        return str(model)
    subprocess.run([sys.executable, __file__, "--prepare", "--workdir", str(workdir)], check=True, env=child_env())
    return str(model)


def _prepare_child(workdir: Path) -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models import build_tiny_model
    from hello_agents_rl.tasks.arithmetic import make_dataset

    tiny = build_tiny_model(workdir / "tiny", seed=0)
    demos = make_dataset("train", SFT_RECIPE["steps"] * SFT_RECIPE["batch_size"], 0, carry_error=SFT_RECIPE["carry_error"])
    RLTrainingTool().run({
        "action": "train", "algorithm": "sft", "model_name": str(tiny), "dataset": demos,
        "output_dir": str(workdir / "sft"), "max_steps": SFT_RECIPE["steps"], "batch_size": SFT_RECIPE["batch_size"],
        "learning_rate": SFT_RECIPE["learning_rate"], "warmup_ratio": 0.05, "use_lora": False, "save_steps": 100_000,
        "logging_steps": 100, "overwrite_output_dir": True, "report_to": "none",
    })


# --- one run (child process) --------------------------------------------------------------------------------


class TrainTimer:
    """Wall and CPU seconds of Trainer.train(), the same instrument for every variant."""

    wall = cpu = 0.0

    @classmethod
    def install(cls) -> None:
        from transformers import Trainer

        original = Trainer.train

        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return original(self, *args, **kwargs)
            finally:
                cls.wall += time.perf_counter() - wall
                cls.cpu += time.process_time() - cpu
                cls.rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        Trainer.train = timed


def held_out_accuracy(model: Any, tokenizer: Any, max_new_tokens: int = 32) -> float:
    from hello_agents_rl.evaluation.run import evaluate_model
    from hello_agents_rl.tasks.arithmetic import make_dataset

    rows = list(make_dataset("test", None, 0))
    return evaluate_model(model, tokenizer, rows, max_new_tokens=max_new_tokens, batch_size=125)["accuracy"]


def run_ours(spec: dict[str, Any], seed: int, model_path: str, out: Path, prompts: Any,
             timed: Any) -> tuple[list[dict], Any, Any]:
    from hello_agents.tools import RLTrainingTool

    import hello_agents_rl.trainers.fast as fast
    from hello_agents_rl.models import load_model, load_tokenizer

    fast.FastGRPOTrainer = timed(fast.FastGRPOTrainer)  # trainers/build.py looks it up at call time

    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": model_path, "output_dir": str(out), "dataset": prompts,
        "max_steps": spec["steps"], "batch_size": spec["prompts"], "num_generations": spec["generations"],
        "max_new_tokens": spec["max_new_tokens"], "kl_coef": spec["kl"], "use_lora": True,
        "lora_rank": LEARNING["lora_r"], "lora_alpha": LEARNING["lora_alpha"], "learning_rate": LEARNING["learning_rate"],
        "temperature": LEARNING["temperature"], "scale_rewards": LEARNING["scale_rewards"], "warmup_ratio": 0.0,
        "reward_type": "accuracy", "seed": seed, "logging_steps": 1, "save_steps": 100_000, "report_to": "none",
    })
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [e for e in logs if "reward" in e], load_model(result["model_path"]), load_tokenizer(result["model_path"])


def run_trl(spec: dict[str, Any], seed: int, model_path: str, out: Path, prompts: Any, tuned: bool,
            timed: Any) -> tuple[list[dict], Any, Any]:
    # As TRL's GRPOTrainer docs show it: a config, a reward function, a LoRA config, the model's path.
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from hello_agents_rl.rewards import accuracy_score

    def accuracy(completions: list, ground_truth: list, **kwargs: Any) -> list[float]:
        return [accuracy_score(c[0]["content"], truth) for c, truth in zip(completions, ground_truth)]

    import torch

    extra = {"gradient_checkpointing": False, "bf16": False} if tuned else {}
    if not torch.cuda.is_available():
        extra["use_cpu"] = True  # transformers refuses to start on a CPU-only machine without it
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=spec["prompts"] * spec["generations"],
        num_generations=spec["generations"], max_completion_length=spec["max_new_tokens"], beta=spec["kl"],
        learning_rate=LEARNING["learning_rate"], temperature=LEARNING["temperature"],
        scale_rewards=LEARNING["scale_rewards"], max_steps=spec["steps"], logging_steps=1, seed=seed,
        report_to="none", save_strategy="no", **extra,
    )
    lora = LoraConfig(r=LEARNING["lora_r"], lora_alpha=LEARNING["lora_alpha"], lora_dropout=0.05,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = timed(GRPOTrainer)(model=model_path, reward_funcs=accuracy, args=args, peft_config=lora,
                          train_dataset=prompts.select_columns(["prompt", "ground_truth"]))
    trainer.train()
    logs = [e for e in trainer.state.log_history if "reward" in e]
    model = trainer.model.merge_and_unload() if hasattr(trainer.model, "merge_and_unload") else trainer.model
    return logs, model.float(), trainer.processing_class


def child(variant: str, workload: str, seed: int, model_path: str, out: Path) -> dict[str, Any]:
    from collections import defaultdict

    from hello_agents_rl.tasks.arithmetic import make_dataset

    TrainTimer.install()
    spec = WORKLOADS[workload]
    prompts = make_dataset("train", spec["steps"] * spec["prompts"], seed=1000 + seed)
    times: dict[str, float] = defaultdict(float)
    batches: list[dict] = []

    def timed(base: type) -> type:
        return timed_trainer(base, times, batches)

    if variant == "ours":
        logs, model, tokenizer = run_ours(spec, seed, model_path, out, prompts, timed)
    else:
        logs, model, tokenizer = run_trl(spec, seed, model_path, out, prompts, variant == "trl_tuned", timed)
    completions = spec["steps"] * spec["prompts"] * spec["generations"]
    tokens = sum(e["completions/mean_length"] for e in logs) * spec["prompts"] * spec["generations"]
    return {
        "variant": variant, "workload": workload, "seed": seed, "steps": len(logs),
        "train_wall_s": TrainTimer.wall, "train_cpu_s": TrainTimer.cpu,
        "completions_per_s": completions / TrainTimer.wall, "tokens_per_s": tokens / TrainTimer.wall,
        "completions_per_cpu_s": completions / TrainTimer.cpu, "s_per_step": TrainTimer.wall / len(logs),
        "peak_rss_mb": TrainTimer.rss_mb, "mean_reward": statistics.fmean(e["reward"] for e in logs),
        "last_quarter_reward": statistics.fmean(e["reward"] for e in logs[-max(1, len(logs) // 4) :]),
        "mean_completion_tokens": tokens / completions,
        "held_out_accuracy": held_out_accuracy(model, tokenizer),
        "split_s_per_step": {k: v / len(logs) for k, v in phase_split(times).items()}, "batches": batches,
    }


# --- the parent: alternate, aggregate, print -----------------------------------------------------------------


def spawn(variant: str, workload: str, seed: int, model_path: str, workdir: Path) -> dict[str, Any]:
    out = workdir / "runs" / f"{workload}-{variant}-{seed}"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    cmd = [sys.executable, __file__, "--child", variant, "--workload", workload, "--seed", str(seed),
           "--model", model_path, "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    return result_of(done, f"{variant} {workload} seed {seed}")


def spread(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f}±{sd:.3f}"


def table(results: list[dict], variants: list[str]) -> str:
    lines = []
    head = (f"{'workload':<8} {'variant':<10} {'compl/s':>8} {'tok/s':>8} {'s/step':>7} {'cpu s':>7} {'RSS MB':>7} "
            f"{'reward (mean±sd)':>17} {'held-out acc':>13}")
    lines.append(head)
    lines.append("-" * len(head))
    for workload in WORKLOADS:
        rows = {v: [r for r in results if r["workload"] == workload and r["variant"] == v] for v in variants}
        if not all(rows.values()):
            continue
        for v in variants:
            rs = rows[v]
            lines.append(
                f"{workload:<8} {v:<10} {median(rs, 'completions_per_s'):>8.1f} {median(rs, 'tokens_per_s'):>8.0f} "
                f"{median(rs, 's_per_step'):>7.3f} {median(rs, 'train_cpu_s'):>7.1f} {median(rs, 'peak_rss_mb'):>7.0f} "
                f"{spread(rs, 'mean_reward'):>17} {spread(rs, 'held_out_accuracy'):>13}"
            )
        for base in [v for v in variants if v != "ours"]:
            o, b = rows["ours"], rows[base]
            lines.append(
                f"{workload:<8} {'ours/' + base:<10} {median(o, 'completions_per_s') / median(b, 'completions_per_s'):>7.2f}x "
                f"{median(o, 'tokens_per_s') / median(b, 'tokens_per_s'):>7.2f}x "
                f"{median(o, 's_per_step') / median(b, 's_per_step'):>6.2f}x "
                f"{median(o, 'train_cpu_s') / median(b, 'train_cpu_s'):>6.2f}x "
                f"{median(o, 'peak_rss_mb') / median(b, 'peak_rss_mb'):>6.2f}x"
            )
    return "\n".join(lines)


# The issue's target on the tiny model, in roofline.verdicts' form
TARGETS = [("small", "speedup", "trl", ">=", 1.6)]  # plain Python, no hand-written kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="small,large")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--with-tuned", action="store_true", help="also run plain TRL with our CPU config choices")
    parser.add_argument("--workdir", default=os.environ.get("HELLO_AGENTS_BENCH_DIR", "/tmp/hello_agents_bench"))
    parser.add_argument("--json", help="write every run's numbers here")
    parser.add_argument("--doc", default="", help="write the table and roofline into this markdown file "
                                                   "(e.g. docs/performance.md)")
    parser.add_argument("--child"), parser.add_argument("--workload"), parser.add_argument("--seed", type=int)
    parser.add_argument("--model"), parser.add_argument("--out"), parser.add_argument("--prepare", action="store_true")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    if args.prepare:
        _prepare_child(workdir)
        return
    if args.child:
        result = child(args.child, args.workload, args.seed, args.model, Path(args.out))
        report(result)
        return
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = prepare(workdir)
    variants = ["ours", "trl"] + (["trl_tuned"] if args.with_tuned else [])
    results = []
    started = time.time()
    shape = roofline.ModelShape.from_config(model_path, lora_rank=LEARNING["lora_r"])
    machines: dict[str, roofline.Machine] = {}
    host = roofline.cpu()  # the CPU every figure holds for, in each run's record
    for workload in args.workloads.split(","):
        spec = WORKLOADS[workload]
        machines[workload] = roofline.measure(shape, spec["prompts"] * spec["generations"],
                                              32 + spec["generations"] * spec["max_new_tokens"], threads=1)
        print(f"  {workload} machine: {roofline.machine_line(machines[workload])}", flush=True)
        for rep in range(args.repeats):
            order = variants if rep % 2 == 0 else variants[::-1]  # alternate who goes first
            for variant in order:
                result = spawn(variant, workload, rep, model_path, workdir) | {"host": host}
                results.append(result)
                print(f"  {workload} seed {rep} {variant:<9} {result['completions_per_s']:7.1f} compl/s "
                      f"{result['train_wall_s']:6.1f} s wall {result['train_cpu_s']:6.1f} s cpu "
                      f"reward {result['mean_reward']:.3f} acc {result['held_out_accuracy']:.3f}", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
    summary = table(results, variants)
    lines = {w: roofline.by_variant(results, w, shape, machines[w]) for w in machines}
    roofs = [f"{w}: {roofline.machine_line(machines[w])}\n\n{roofline.markdown(lines[w])}" for w in machines]
    targets = roofline.verdicts(results, TARGETS, lines)
    print("", summary, "", "Roofline (medians over seeds):", *roofs, "", "Targets:", *targets, sep="\n")
    if args.doc:
        from real_model_common import write_run_block

        body = ["```", summary, "```", "", "Targets:", "", *[f"* {t}" for t in targets], "",
                "Roofline (benchmarks/roofline.py: the machine measured in this run, one thread):", "", *roofs]
        write_run_block(args.doc, "tiny-speed", body, started)


if __name__ == "__main__":
    main()
