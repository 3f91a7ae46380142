"""Does dynamic sampling pay on SmolLM2? `make demo-real`'s recipe, GRPO with dynamic_sampling off and on, same SFT.

    python benchmarks/dynamic_sampling.py [--modes skip resample] [--seeds 0 1 2] [--threads 2] [--output-dir DIR]
                                          [--doc README.md] [--report DIR/summary.json]

Run it on an idle machine: it compares CPU times. Per seed, one SFT (the demo's, reused by every variant), then
each GRPO variant in a process of its own (its CPU time is the GRPO phase's: user + system, all threads), then
the held-out evaluation (250 questions, greedy) of the SFT model and of each GRPO model.

PASS for a mode when, over the seeds, either
  - its mean GRPO - SFT gain is no worse than off's mean minus off's seed spread (max - min gain over the seeds)
    and its mean GRPO CPU time is at most 0.75x off's; or
  - its mean gain is higher than off's and its mean GRPO CPU time at most off's.
Else FAIL: dynamic sampling stays off by default (README: Dynamic sampling).
`--smoke` runs the tiny model with a few steps: it checks that the script works, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

MAX_CPU_RATIO = 0.75


def child(args: argparse.Namespace) -> None:
    """One phase in this process: `sft` (writes its model) or `grpo` (times itself); results.json in --out."""
    import trl  # noqa: F401 -- imported before the clock starts: the phase's time, not the import's

    from hello_agents_rl.outputs import atomic_write_json
    from hello_agents_rl.workflows import demo

    recipe = _recipe(args)
    out = Path(args.out)
    started_cpu, started = time.process_time(), time.time()
    if args.phase == "sft":
        start = demo.build_tiny_model(out / "tiny", seed=args.seed) if args.smoke else demo.smollm2_gguf()
        trained = demo.train_sft(str(start), out / "sft", recipe, args.seed)
    else:
        trained = demo.train_grpo(args.sft, out / "grpo", replace(recipe, dynamic_sampling=args.mode), args.seed)
    cpu, wall = time.process_time() - started_cpu, time.time() - started
    evaluation = demo.evaluate(trained["model_path"], recipe, args.seed)
    atomic_write_json(out / "phase.json", {"model_path": trained["model_path"], "cpu_s": cpu, "wall_s": wall,
                                           "details": evaluation["details"], "accuracy": evaluation["accuracy"]})


def _recipe(args: argparse.Namespace):
    from hello_agents_rl.workflows import demo

    if args.smoke:
        return replace(demo.QUICK, sft_steps=20, grpo_steps=4, grpo_batch_size=2, num_generations=4)
    return demo.SMOLLM2


def _run(args: argparse.Namespace, phase: str, out: Path, **extra: str) -> dict:
    command = [sys.executable, __file__, "--phase", phase, "--seed", str(args.seed_now), "--out", str(out),
               *(["--smoke"] if args.smoke else []), *[f"--{k}={v}" for k, v in extra.items()]]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "log.txt").open("w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return json.loads((out / "phase.json").read_text())


def zero_variance(run_dir: Path) -> float | None:
    """The mean over the run's logs of the share of groups whose rewards were all equal (TRL's count)."""
    values = [e["frac_reward_zero_std"] for e in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
              if "frac_reward_zero_std" in e]
    return sum(values) / len(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["skip", "resample"], choices=["skip", "resample"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every phase (default: all cores)")
    parser.add_argument("--output-dir", default="outputs/dynamic_sampling")
    parser.add_argument("--doc", help="also write the table and verdicts into this markdown file's block (README.md)")
    parser.add_argument("--report", help="no runs: the table and verdicts of an earlier run's summary.json")
    parser.add_argument("--smoke", action="store_true", help="tiny model, a few steps: the script works, nothing more")
    parser.add_argument("--phase", choices=["sft", "grpo"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--sft", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="off", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        child(args)
        return 0
    if args.report:
        return finish(args, json.loads(Path(args.report).read_text()))
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from hello_agents_rl.evaluation.stats import paired_gain

    root = Path(args.output_dir)
    variants = ["off", *args.modes]
    rows: dict[str, list[dict]] = {v: [] for v in variants}
    for seed in args.seeds:
        args.seed_now = seed
        sft = _run(args, "sft", root / f"seed{seed}" / "sft")
        for mode in variants:
            out = root / f"seed{seed}" / mode
            grpo = _run(args, "grpo", out, sft=sft["model_path"], mode=mode)
            gain = paired_gain(sft["details"], grpo["details"])
            rows[mode].append({"seed": seed, "sft": sft["accuracy"], "grpo": grpo["accuracy"], "gain": gain["points"],
                               "interval": gain["interval"], "cpu_s": grpo["cpu_s"], "wall_s": grpo["wall_s"],
                               "zero_variance": zero_variance(out / "grpo")})
    (root / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    return finish(args, rows)


def finish(args: argparse.Namespace, rows: dict[str, list[dict]]) -> int:
    """Print the table and the verdicts; with --doc, write them into that file's block too."""
    lines = [f"{'mode':>8} {'seed':>4} | {'SFT':>6} {'GRPO':>6} | {'gain':>6} {'95% interval':>16} | "
             f"{'GRPO cpu s':>10} {'wall s':>7} | zero-var"]
    for mode, runs in rows.items():
        for r in runs:
            zv = "-" if r["zero_variance"] is None else f"{r['zero_variance']:.2f}"
            lines.append(f"{mode:>8} {r['seed']:>4} | {r['sft']:>6.1%} {r['grpo']:>6.1%} | {r['gain']:>+6.1f} "
                         f"[{r['interval'][0]:+6.1f}, {r['interval'][1]:+6.1f}] | {r['cpu_s']:>10.0f} "
                         f"{r['wall_s']:>7.0f} | {zv}")
    verdicts = [verdict(mode, rows["off"], rows[mode]) for mode in rows if mode != "off"]
    print("\n".join(lines + verdicts))
    if args.doc:
        from real_model_common import write_block

        seeds = " ".join(str(r["seed"]) for r in rows["off"])
        block = (f"Measured by `python benchmarks/dynamic_sampling.py --seeds {seeds} --threads 2` (held-out, greedy, "
                 f"250 questions; zero-var: TRL's share of groups whose rewards were all equal):\n\n```\n"
                 + "\n".join(lines) + "\n```\n\n" + "\n".join(f"- {v}" for v in verdicts))
        write_block(Path(args.doc), block, ("<!-- dynamic-sampling:start -->", "<!-- dynamic-sampling:end -->"))
    return 0 if all(v.startswith("PASS") for v in verdicts) else 1


def verdict(mode: str, off: list[dict], on: list[dict]) -> str:
    def mean(runs: list[dict], key: str) -> float:
        return sum(r[key] for r in runs) / len(runs)

    spread = max(r["gain"] for r in off) - min(r["gain"] for r in off)
    gain_off, gain_on = mean(off, "gain"), mean(on, "gain")
    ratio = mean(on, "cpu_s") / mean(off, "cpu_s")
    faster = gain_on >= gain_off - spread and ratio <= MAX_CPU_RATIO
    better = gain_on > gain_off and ratio <= 1.0
    text = (f"{mode}: mean gain {gain_on:+.1f} vs off {gain_off:+.1f} (off's seed spread {spread:.1f}), "
            f"GRPO CPU time {ratio:.3f}x off's (needed: no worse gain in <= {MAX_CPU_RATIO}x, or a higher one in <= 1x)")
    return f"{'PASS' if faster or better else 'FAIL'} {text}"


if __name__ == "__main__":
    raise SystemExit(main())
