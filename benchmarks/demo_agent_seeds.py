"""The agent demo over several seeds, against issue 34's targets; prints each seed's figures and PASS/FAIL.

    python benchmarks/demo_agent_seeds.py [--seeds 0 1 2] [--model tiny|smollm2] [--quick] [--out-dir DIR] [--reuse]
                                          [--readme]

Run it with a Python that has hello-agents (pip install 'hello-agents-rl[agent]'). Each seed runs
`hello-agents-rl demo --task agent` in a fresh process; `--reuse` reads a finished seed's results.json instead.
Target: the real agent loop's task success (agent.run against `serve` of each model, held-out questions) rises
from SFT to GRPO by at least 30 points on every seed. `--readme` writes the report between the README's
demo-agent markers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# SmolLM2's quick variant trains as the full one (only fewer questions are asked), so its target is the same
TARGETS = {("tiny", False): 30.0, ("tiny", True): 15.0, ("smollm2", False): 30.0, ("smollm2", True): 30.0}


def run_seed(seed: int, out: Path, model: str, quick: bool, reuse: bool) -> dict:
    if not (reuse and (out / "results.json").is_file()):
        command = [sys.executable, "-m", "hello_agents_rl.cli", "demo", "--task", "agent", "--output-dir", str(out),
                   "--seed", str(seed), "--model", model] + (["--quick"] if quick else [])
        out.parent.mkdir(parents=True, exist_ok=True)
        with (out.parent / f"{out.name}.log").open("w") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return json.loads((out / "results.json").read_text())


def record_smollm2(runs: dict[int, dict], report: str, command: str) -> None:
    from real_model_readme import record_seeds

    rows = [{"label": f", seed {seed} (tool calls {r['sft']['tool_call_rate']:.0%} -> {r['grpo']['tool_call_rate']:.0%}, "
                      f"{r['grpo_minus_sft']['questions']} questions"
                      f"{'; agents re-run on its trained models, wall: that re-run' if r.get('reused_training') else ''})",
             "start": r["sft"]["accuracy"], "after": r["grpo"]["accuracy"], "gain": r["grpo_minus_sft"]["points"],
             "interval": r["grpo_minus_sft"]["interval"], "wall_s": r["wall_time_s"]} for seed, r in runs.items()]
    record_seeds("agent", "demo_agent_seeds.py", rows, command,
                 "## The agent demo on SmolLM2 (figures written by the script)\n\n" + report)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out-dir", default="outputs/demo_agent_seeds")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--readme", action="store_true", help="write the report into README.md")
    args = parser.parse_args()
    started = time.time()
    target = TARGETS[(args.model, args.quick)]
    runs = {seed: run_seed(seed, Path(args.out_dir) / f"seed{seed}", args.model, args.quick, args.reuse)
            for seed in args.seeds}
    lines = [f"Measured by `python benchmarks/demo_agent_seeds.py --seeds {' '.join(map(str, args.seeds))} --model "
             f"{args.model}{' --quick' if args.quick else ''}{' --reuse' if args.reuse else ''}` (hello-agents {runs[args.seeds[0]]['hello_agents']} "
             "SimpleAgent; task success of agent.run against `serve` of each model on held-out questions):", "",
             "| seed | SFT task success | GRPO task success | gain (points) | 95% paired interval | tool calls SFT -> GRPO "
             "| questions | demo wall s |", "|---:|---:|---:|---:|---|---|---:|---:|"]
    for seed, r in runs.items():
        gain = r["grpo_minus_sft"]
        lines.append(f"| {seed} | {r['sft']['accuracy']:.1%} | **{r['grpo']['accuracy']:.1%}** | {gain['points']:+.1f} | "
                     f"{gain['interval'][0]:+.1f} to {gain['interval'][1]:+.1f} | {r['sft']['tool_call_rate']:.1%} -> "
                     f"{r['grpo']['tool_call_rate']:.1%} | {gain['questions']} | {r['wall_time_s']:.0f} |")
    verdicts = [r["grpo_minus_sft"]["points"] >= target for r in runs.values()]
    lines.append("")
    lines += [f"{'PASS' if ok else 'FAIL'} seed {seed}: GRPO - SFT {r['grpo_minus_sft']['points']:+.1f} points >= "
              f"+{target:g}" + (" (training reused from an earlier run: " + ", ".join(r["reused_training"]) + ")"
                                if r.get("reused_training") else "") for (seed, r), ok in zip(runs.items(), verdicts)]
    lines.append(f"{'PASS' if all(verdicts) else 'FAIL'} every seed")
    report = "\n".join(lines) + "\n"
    print(report + f"({time.time() - started:.0f} s)")
    if args.readme and args.model == "smollm2":  # the real-model table (README) and docs/real_model.md
        record_smollm2(runs, report, lines[0].split("`")[1] + " --readme")
    elif args.readme:
        from readme_blocks import write_block

        write_block("demo-agent", report)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
