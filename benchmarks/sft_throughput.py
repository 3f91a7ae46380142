"""SFT throughput and learning: our tool vs plain TRL SFTTrainer, same workload, side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sft_throughput.py --repeats 3 --with-tuned --doc docs/performance.md

The same structure as grpo_throughput.py: one subprocess per run (OMP_NUM_THREADS=1, offline), the
variants alternating within each repeat, a new seed per repeat shared by the variants. The workload:
the tiny Qwen3 (random init, its own tokenizer) learning the arithmetic task from demonstrations, LoRA
r16 / alpha 32 / dropout 0.05 on all linear layers, 16 examples per step, the same learning rate,
schedule, max_length and loss on the completion only. Variants:

* ours          -- `RLTrainingTool().run({... "algorithm": "sft" ...})`;
* trl           -- plain `trl.SFTTrainer` as TRL's docs show it (SFTConfig + LoraConfig + dataset);
* trl_tuned     -- (--with-tuned) plain TRL plus our CPU config (gradient_checkpointing=False, bf16=False);
* padding_free  -- (--with-padding-free) ours plus TRL's padding_free=True, measured, not on by default;
* fast_dropout  -- (--with-fast-dropout) ours plus trainers/fast/dropout.py's FastDropout on the LoRA layers (now on
                   by default in both trainers: this variant equals `ours` since; kept to re-measure).

Reported: samples/s and seconds per step of train() (wall, and CPU seconds), peak RSS, the final
training loss and the held-out greedy accuracy (250 test questions) after the same number of examples; and the
roofline of a step (benchmarks/roofline.py: the machine measured in this run, the work of the step's tokens as
the chat template renders them, the LM head on the completion tokens only) with --doc writing it all into a
markdown block.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roofline
from grpo_throughput import TrainTimer, child_env, held_out_accuracy, spread

WORKLOAD = {"steps": 120, "batch_size": 16, "learning_rate": 2e-3, "max_length": 1024, "lora_r": 16, "lora_alpha": 32}


def _data(seed: int) -> Any:
    from hello_agents_rl.tasks.arithmetic import make_dataset

    return make_dataset("train", WORKLOAD["steps"] * WORKLOAD["batch_size"], seed=2000 + seed)


def run_ours(model_path: str, seed: int, out: Path, padding_free: bool, fast_dropout: bool = False) -> tuple[list[dict], Any, Any]:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models import load_model, load_tokenizer

    if fast_dropout:  # kept from before it was the default (trainers/build.py): a no-op on top of it now
        from trl import SFTTrainer

        from hello_agents_rl.trainers.fast import use_fast_dropout

        original_init = SFTTrainer.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            use_fast_dropout(self.model)

        SFTTrainer.__init__ = init

    if padding_free:  # an experiment: our mapping plus TRL's padding_free (not a config key of ours)
        from hello_agents_rl.trainers import sft as sft_module

        original = sft_module.trl_args
        sft_module.trl_args = lambda cfg, *a, **k: {**original(cfg, *a, **k), "padding_free": True, "max_length": None}
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "sft", "model_name": model_path, "output_dir": str(out), "dataset": _data(seed),
        "max_steps": WORKLOAD["steps"], "batch_size": WORKLOAD["batch_size"], "learning_rate": WORKLOAD["learning_rate"],
        "max_length": WORKLOAD["max_length"], "use_lora": True, "lora_rank": WORKLOAD["lora_r"],
        "lora_alpha": WORKLOAD["lora_alpha"], "warmup_ratio": 0.0, "seed": seed, "logging_steps": 10,
        "save_steps": 100_000, "report_to": "none",
    })
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [e for e in logs if "loss" in e], load_model(result["model_path"]), load_tokenizer(result["model_path"])


def run_trl(model_path: str, seed: int, out: Path, tuned: bool) -> tuple[list[dict], Any, Any]:
    # As TRL's SFTTrainer docs show it: a config, a LoRA config, a prompt/completion dataset, the model's path.
    import torch
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    extra: dict[str, Any] = {"gradient_checkpointing": False, "bf16": False} if tuned else {}
    if not torch.cuda.is_available():
        extra["use_cpu"] = True
    args = SFTConfig(
        output_dir=str(out), per_device_train_batch_size=WORKLOAD["batch_size"], max_steps=WORKLOAD["steps"],
        learning_rate=WORKLOAD["learning_rate"], max_length=WORKLOAD["max_length"], logging_steps=10, seed=seed,
        report_to="none", save_strategy="no", **extra,
    )
    lora = LoraConfig(r=WORKLOAD["lora_r"], lora_alpha=WORKLOAD["lora_alpha"], lora_dropout=0.05,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model_path, args=args, peft_config=lora,
                         train_dataset=_data(seed).select_columns(["prompt", "completion"]))
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    return logs, trainer.model.merge_and_unload().float(), trainer.processing_class


def step_counts(seed: int, tokenizer: Any) -> dict[str, float]:
    """A step's batch as the chat template renders it (means over the run's steps): roofline.BatchCounts' fields."""
    def tokens(messages: list[dict], **kwargs: Any) -> int:
        return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"])

    rows = list(_data(seed))
    prompt = [tokens(r["prompt"], add_generation_prompt=True) for r in rows]
    total = [tokens(r["prompt"] + r["completion"]) for r in rows]
    steps, batch = WORKLOAD["steps"], WORKLOAD["batch_size"]
    return {"rows": batch, "prompt_tokens": sum(prompt) / steps, "completion_tokens": (sum(total) - sum(prompt)) / steps,
            "decode_steps": 0, "prompt_length": sum(prompt) / len(prompt)}


def roofline_lines(results: list[dict], variants: list[str], shape: roofline.ModelShape,
                   machine: roofline.Machine) -> dict[str, list[dict]]:
    """Each variant's step (forward, backward and optimizer: s/step of train()) against the step's compute bound."""
    out = {}
    for variant in variants:
        rows = [r for r in results if r["variant"] == variant]
        work = roofline.phase_work(shape, roofline.mean_counts([r["counts"] for r in rows]), machine)["train_fwd_bwd"]
        out[variant] = [roofline.phase_row("sft step", work, statistics.median(r["s_per_step"] for r in rows))]
    return out


def child(variant: str, seed: int, model_path: str, out: Path) -> dict[str, Any]:
    TrainTimer.install()
    if variant in ("ours", "padding_free", "fast_dropout"):
        logs, model, tokenizer = run_ours(model_path, seed, out, variant == "padding_free", variant == "fast_dropout")
    else:
        logs, model, tokenizer = run_trl(model_path, seed, out, tuned=variant == "trl_tuned")
    samples = WORKLOAD["steps"] * WORKLOAD["batch_size"]
    return {
        "variant": variant, "seed": seed, "train_wall_s": TrainTimer.wall, "train_cpu_s": TrainTimer.cpu,
        "samples_per_s": samples / TrainTimer.wall, "samples_per_cpu_s": samples / TrainTimer.cpu,
        "s_per_step": TrainTimer.wall / WORKLOAD["steps"], "peak_rss_mb": TrainTimer.rss_mb,
        "final_loss": logs[-1]["loss"], "held_out_accuracy": held_out_accuracy(model, tokenizer),
        "counts": step_counts(seed, tokenizer),
    }


def spawn(variant: str, seed: int, model_path: str, workdir: Path) -> dict[str, Any]:
    import shutil

    out = workdir / "runs" / f"sft-{variant}-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, __file__, "--child", variant, "--seed", str(seed), "--model", model_path, "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    line = next((out for out in reversed(done.stdout.splitlines()) if out.startswith("RESULT ")), None)
    if done.returncode or line is None:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-5000:])
        raise SystemExit(f"sft {variant} seed {seed} failed (exit {done.returncode})")
    return json.loads(line.removeprefix("RESULT "))


def table(results: list[dict], variants: list[str]) -> str:
    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    rows = {v: [r for r in results if r["variant"] == v] for v in variants}
    head = (f"{'variant':<13} {'samples/s':>9} {'s/step':>7} {'cpu s':>6} {'RSS MB':>7} {'final loss (mean±sd)':>21} "
            f"{'held-out acc':>13}")
    lines = [head, "-" * len(head)]
    for v in variants:
        rs = rows[v]
        lines.append(f"{v:<13} {med(rs, 'samples_per_s'):>9.1f} {med(rs, 's_per_step'):>7.3f} {med(rs, 'train_cpu_s'):>6.1f} "
                     f"{med(rs, 'peak_rss_mb'):>7.0f} {spread(rs, 'final_loss'):>21} {spread(rs, 'held_out_accuracy'):>13}")
    for base in [v for v in variants if v not in ("ours", "padding_free", "fast_dropout")]:
        o, b = rows["ours"], rows[base]
        lines.append(f"{'ours/' + base:<13} {med(o, 'samples_per_s') / med(b, 'samples_per_s'):>8.2f}x "
                     f"{med(o, 's_per_step') / med(b, 's_per_step'):>6.2f}x {med(o, 'train_cpu_s') / med(b, 'train_cpu_s'):>5.2f}x "
                     f"{med(o, 'peak_rss_mb') / med(b, 'peak_rss_mb'):>6.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--with-tuned", action="store_true")
    parser.add_argument("--with-padding-free", action="store_true")
    parser.add_argument("--with-fast-dropout", action="store_true")
    parser.add_argument("--workdir", default=os.environ.get("HELLO_AGENTS_BENCH_DIR", "/tmp/hello_agents_bench"))
    parser.add_argument("--json")
    parser.add_argument("--doc", default="", help="write the table and the roofline into this markdown file "
                        "(the block between its sft-speed markers)")
    parser.add_argument("--child"), parser.add_argument("--seed", type=int), parser.add_argument("--model")
    parser.add_argument("--out")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.seed, args.model, Path(args.out))), flush=True)
        return
    workdir.mkdir(parents=True, exist_ok=True)
    from hello_agents_rl.models import build_tiny_model

    tiny = workdir / "tiny"  # SFT starts from the random tiny model (grpo_throughput.py builds the same one)
    if not (tiny / "config.json").is_file():
        build_tiny_model(tiny, seed=0)
    variants = ["ours", "trl"] + (["trl_tuned"] if args.with_tuned else []) + (["padding_free"] if args.with_padding_free else [])
    variants += ["fast_dropout"] if args.with_fast_dropout else []
    started = time.time()
    shape = roofline.ModelShape.from_config(tiny, lora_rank=WORKLOAD["lora_r"])
    from hello_agents_rl.models import load_tokenizer

    counts = step_counts(0, load_tokenizer(str(tiny)))  # a step's tokens: the rows of its training GEMMs
    machine = roofline.measure(shape, WORKLOAD["batch_size"], round(counts["prompt_tokens"] + counts["completion_tokens"]),
                               threads=1)
    print(f"  machine: {roofline.machine_line(machine)}", flush=True)
    results = []
    for rep in range(args.repeats):
        for variant in variants if rep % 2 == 0 else variants[::-1]:
            result = spawn(variant, rep, str(tiny), workdir)
            results.append(result)
            print(f"  sft seed {rep} {variant:<12} {result['samples_per_s']:7.1f} samples/s {result['train_wall_s']:6.1f} s wall "
                  f"{result['train_cpu_s']:6.1f} s cpu loss {result['final_loss']:.3f} acc {result['held_out_accuracy']:.3f}",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    summary = table(results, variants)
    roofs = roofline.markdown(roofline_lines(results, variants, shape, machine))
    print("", summary, "", "Roofline (medians over seeds):", roofline.machine_line(machine), "", roofs, sep="\n")
    if args.doc:
        from real_model_common import write_run_block

        write_run_block(args.doc, "sft-speed", ["```", summary, "```", "", "Roofline (benchmarks/roofline.py: the "
                                                "machine measured in this run, one thread):", "",
                                                roofline.machine_line(machine), "", roofs], started)


if __name__ == "__main__":
    main()
