"""The tool demo over several seeds, against issue 11's targets; writes the README's table.

    python benchmarks/demo_tools_seeds.py [--seeds 0 1 2] [--quick] [--threads 1] [--readme] [--reuse]

Each seed runs `hello-agents-rl demo --task tools` in a fresh process (its wall time includes start-up
and imports, as a user sees it). Targets (full demo): on held-out questions, greedy, calculator
available, GRPO beats SFT by >= 30 points on average and >= 20 on every seed, <= 6 minutes per demo
on 2 CPU cores. `--readme` writes the measured table between the README's demo-tools markers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# the tiny demo runs on one thread: its CPU seconds are its wall time on an idle core (a shared machine's wall clock
# counts the neighbours too); SmolLM2's target is wall time on 2 idle cores (both clocks are in the table)
TARGETS = {"mean_gain": 30.0, "min_gain": 20.0, "max_cpu_s": 360.0}
QUICK_TARGETS = {"mean_gain": 15.0, "min_gain": 15.0, "max_cpu_s": 180.0}  # CI: tests/test_demo_tools.py
SMOLLM2_TARGETS = {"mean_gain": 30.0, "min_gain": 30.0, "max_wall_s": 900.0}  # issue 19: >= +30, <= 15 minutes
SMOLLM2_QUICK_TARGETS = {"mean_gain": 30.0, "min_gain": 30.0, "max_wall_s": 900.0}  # the same training: only 100 questions
TARGET_SETS = {("tiny", False): TARGETS, ("tiny", True): QUICK_TARGETS, ("smollm2", False): SMOLLM2_TARGETS,
               ("smollm2", True): SMOLLM2_QUICK_TARGETS}


def run_seed(seed: int, out: Path, quick: bool, reuse: bool = False, model: str = "tiny", task: str = "tools") -> dict:
    if reuse and (out / "results.json").is_file():  # rebuild the table from a finished run (no re-training)
        results = json.loads((out / "results.json").read_text())
        timing = out / "process.json"
        results.update(json.loads(timing.read_text()) if timing.is_file()
                       else {"process_wall_s": results["wall_time_s"]})  # older runs: the demo's own clock
        return results
    command = [sys.executable, "-m", "hello_agents_rl.cli", "demo", "--task", task, "--output-dir", str(out),
               "--seed", str(seed), "--model", model] + (["--quick"] if quick else []) + (["--reuse"] if reuse else [])
    started, cpu_before = time.time(), _children_cpu()
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    results = json.loads((out / "results.json").read_text())
    results["process_wall_s"] = round(time.time() - started, 1)
    # CPU seconds: on a machine shared with other jobs the wall clock overstates the demo's own cost
    results["process_cpu_s"] = round(_children_cpu() - cpu_before, 1)
    (out / "process.json").write_text(json.dumps({k: results[k] for k in ("process_wall_s", "process_cpu_s")}))
    return results


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def table(runs: dict[int, dict]) -> tuple[str, dict[str, float]]:
    lines = ["| seed | SFT accuracy | GRPO accuracy | gain (points) | tool-call rate SFT -> GRPO | failed calls (GRPO) "
             "| wall s | CPU s |", "|---:|---:|---:|---:|---|---:|---:|---:|"]
    gains, walls = [], []
    for seed, r in runs.items():
        s, g = r["sft"], r["grpo"]
        gain = (g["accuracy"] - s["accuracy"]) * 100
        gains.append(gain)
        walls.append(r["process_wall_s"])
        lines.append(f"| {seed} | {s['accuracy']:.1%} | **{g['accuracy']:.1%}** | {gain:+.1f} | "
                     f"{s['tool_call_rate']:.1%} -> {g['tool_call_rate']:.1%} | {g['failed_call_rate']:.1%} | "
                     f"{r['process_wall_s']:.0f} | {r.get('process_cpu_s', r.get('cpu_time_s', float('nan'))):.0f} |")
    cpus = [r.get("process_cpu_s", r.get("cpu_time_s", float("inf"))) for r in runs.values()]
    summary = {"mean_gain": sum(gains) / len(gains), "min_gain": min(gains), "max_wall_s": max(walls),
               "max_cpu_s": max(cpus)}
    return "\n".join(lines), summary


def check(summary: dict[str, float], targets: dict[str, float]) -> list[str]:
    clock = "cpu" if "max_cpu_s" in targets else "wall"
    limit = targets[f"max_{clock}_s"]
    return [f"{'PASS' if ok else 'FAIL'} {text}" for ok, text in (
        (summary["mean_gain"] >= targets["mean_gain"], f"mean gain >= {targets['mean_gain']:g} points"),
        (summary["min_gain"] >= targets["min_gain"], f"every seed's gain >= {targets['min_gain']:g} points"),
        (summary[f"max_{clock}_s"] <= limit, f"{clock.upper() if clock == 'cpu' else clock} time <= {limit:g} s per demo"),
    )]


def record_smollm2(runs: dict[int, dict], report: str, command: str) -> None:
    from real_model_readme import record_seeds

    rows = [{"label": f", seed {seed} (tool calls {r['sft']['tool_call_rate']:.0%} -> {r['grpo']['tool_call_rate']:.0%})",
             "start": r["sft"]["accuracy"], "after": r["grpo"]["accuracy"],
             "gain": round(100 * (r["grpo"]["accuracy"] - r["sft"]["accuracy"]), 1),
             "interval": r["grpo_minus_sft"]["interval"], "wall_s": r["process_wall_s"]} for seed, r in runs.items()]
    record_seeds("tools", "demo_tools_seeds.py", rows, command,
                 "## The tool demo on SmolLM2 (figures written by the script)\n\n" + report)


def seeds_parser(doc: str, output_dir: str | None) -> argparse.ArgumentParser:
    """The options every demo-over-seeds script takes."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the runs")
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--output-dir", default=output_dir, help=f"default: {output_dir or 'per model'}")
    parser.add_argument("--reuse", action="store_true",
                        help="use finished runs in --output-dir instead of re-running (e.g. seeds run in parallel); a seed "
                        "not finished keeps the SFT and GRPO runs its folder completed with the same settings")
    return parser


def main() -> int:
    parser = seeds_parser(__doc__ or "", None)
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    root = Path(args.output_dir or f"outputs/demo_tools_seeds{'_smollm2' if args.model == 'smollm2' else ''}")
    root.mkdir(parents=True, exist_ok=True)
    runs = {seed: run_seed(seed, root / f"seed{seed}", args.quick, args.reuse, args.model) for seed in args.seeds}
    text, summary = table(runs)
    verdicts = check(summary, TARGET_SETS[(args.model, args.quick)])
    model = f" --model {args.model}" if args.model != "tiny" else ""
    command = (f"python benchmarks/demo_tools_seeds.py{model} --seeds {' '.join(map(str, args.seeds))}"
               f"{' --quick' if args.quick else ''}{f' --threads {args.threads}' if args.threads else ''}"
               f"{' --reuse' if args.reuse else ''}")
    report = (f"Measured by `{command}` (held-out, greedy, {runs[args.seeds[0]]['grpo']['num_questions']} questions "
              f"never seen in training, calculator available):\n\n{text}\n\nMean gain {summary['mean_gain']:+.1f} "
              f"points, at least {summary['min_gain']:+.1f} on every seed, slowest demo {summary['max_cpu_s']:.0f} CPU s "
              f"(wall s: the clock of the machine the seeds ran on, which may be shared with other jobs) "
              f"({'; '.join(verdicts)}).\n")
    print(report)
    (root / "summary.json").write_text(json.dumps({"summary": summary, "verdicts": verdicts}, indent=2))
    if args.readme and args.model == "smollm2":  # docs/real_model.md and the README's real-model table
        record_smollm2(runs, report, command + " --readme")
    if args.readme and args.model == "tiny":
        from readme_blocks import write_block

        write_block("demo-tools", report)
    return 0 if all(v.startswith("PASS") for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
