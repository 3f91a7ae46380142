"""The multi-step tool demo (`hello-agents-rl demo --task lookups`) over seeds, against its targets.

    python benchmarks/demo_lookups_seeds.py [--seeds 0 1 2] [--quick] [--threads 1] [--reuse] [--agent]

Each seed runs the demo in a fresh process: SFT on an imperfect demonstrator that guesses or stops a chain of
lookups one call early, then GRPO rewarded for the right final answer, both scored greedily on 250 held-out
questions about entities training never saw. `--agent` runs `demo --task agent-lookups` instead: a hello-agents
ReActAgent with lookup and calculator Tools of its own, trained as it is and scored by agent.run against the served
model (run it with a Python that has hello-agents). Per seed, before and after GRPO: task success, the share of questions
whose every chain call was made, calls per question, and the share of calls that failed (a name that is not in
the knowledge base, a bad expression). Targets, each seed on its own (a recipe that passes on one seed only is not
a result): SFT's task success between 10% and 60% (the demonstrator's habits learnt, not the task), and GRPO at
least +25 points above it (tiny) or +15 (`--model smollm2`, whose GRPO phase must also fit 40 CPU-minutes).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_tools_seeds import run_seed, seeds_parser

SFT_BAND = (0.10, 0.60)
MIN_GAIN = {"tiny": 25.0, "smollm2": 15.0}
MAX_GRPO_CPU_MIN = {"smollm2": 40.0}  # the GRPO phase's budget, every thread's CPU time (none for the tiny model)


def report(runs: dict[int, dict], model: str) -> tuple[str, list[str]]:
    budget = MAX_GRPO_CPU_MIN.get(model)  # a GRPO CPU-minutes column and verdict where the model has a budget
    lines = ["| seed | SFT success | GRPO success | gain | chain done SFT -> GRPO | calls/question SFT -> GRPO | "
             "failed calls SFT -> GRPO | GRPO s | " + ("GRPO CPU min | " if budget else "") + "CPU s |",
             "|---:|---:|---:|---:|---|---|---|---:|---:|" + ("---:|" if budget else "")]
    verdicts = []
    for seed, r in runs.items():
        s, g = r["sft"], r["grpo"]
        gain = 100 * (g["accuracy"] - s["accuracy"])
        cpu_s = _grpo_cpu_seconds(r)
        cpu_text = "unmeasured" if cpu_s is None else f"{cpu_s / 60:.1f}"
        lines.append(f"| {seed} | {s['accuracy']:.1%} | **{g['accuracy']:.1%}** | {gain:+.1f} | "
                     f"{s['chain_completion_rate']:.1%} -> {g['chain_completion_rate']:.1%} | "
                     f"{s['mean_calls']:.2f} -> {g['mean_calls']:.2f} | {s['failed_call_rate']:.1%} -> "
                     f"{g['failed_call_rate']:.1%} | {_grpo_seconds(r):.0f} | "
                     + (f"{'-' if cpu_s is None else cpu_text} | " if budget else "") + f"{_cpu(r)} |")
        in_band = SFT_BAND[0] <= s["accuracy"] <= SFT_BAND[1]
        verdicts.append(f"{'PASS' if in_band else 'FAIL'} seed {seed}: SFT success {s['accuracy']:.1%} in "
                        f"[{SFT_BAND[0]:.0%}, {SFT_BAND[1]:.0%}]")
        verdicts.append(f"{'PASS' if gain >= MIN_GAIN[model] else 'FAIL'} seed {seed}: GRPO - SFT {gain:+.1f} points "
                        f">= +{MIN_GAIN[model]:g}")
        if budget:
            verdicts.append(f"{'PASS' if cpu_s is not None and cpu_s <= 60 * budget else 'FAIL'} seed {seed}: "
                            f"GRPO phase {cpu_text} CPU-minutes <= {budget:g}")
    return "\n".join(lines), verdicts


def _grpo_seconds(run: dict) -> float:
    """The GRPO phase: its training run's own time where the demo kept it, else the demo's lap (older records)."""
    return (run.get("train_runtime_s") or {}).get("grpo") or run["seconds"]["grpo"]


def _grpo_cpu_seconds(run: dict) -> float | None:
    """The GRPO phase's CPU seconds (every thread's): the demo's lap, or where the demo reused the training run, the
    CPU time that run recorded itself; None where neither was recorded (or the run resumed, counting part of it)."""
    phases = run.get("train_cpu_s") if "grpo" in run.get("reused_training", []) else run.get("cpu_seconds")
    return (phases or {}).get("grpo")


def _cpu(run: dict) -> str:
    """The demo's CPU seconds: its process's, else its own clock's; "-" where neither was recorded (a rerun of the
    agents alone on models an earlier, interrupted process trained)."""
    seconds = run.get("process_cpu_s", run.get("cpu_time_s"))
    return "-" if seconds is None else f"{seconds:.0f}"


def main() -> int:
    parser = seeds_parser(__doc__ or "", None)
    parser.add_argument("--doc", action="store_true", help="write the table into docs/agentic.md's demo-lookups block (of the agent, of smollm2)")
    parser.add_argument("--agent", action="store_true", help="the ReActAgent demo (demo --task agent-lookups)")
    args = parser.parse_args()
    task = "agent-lookups" if args.agent else "lookups"
    kind = task + ("-smollm2" if args.model == "smollm2" else "")  # docs/agentic.md's block, docs/runs/<kind>/
    block_name = f"demo-{kind}"
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    root = Path(args.output_dir or f"outputs/demo_{kind.replace('-', '_')}_seeds")
    root.mkdir(parents=True, exist_ok=True)
    runs = {seed: run_seed(seed, root / f"seed{seed}", args.quick, args.reuse, args.model, task=task)
            for seed in args.seeds}
    text, verdicts = report(runs, args.model)
    command = (f"python benchmarks/demo_lookups_seeds.py --seeds {' '.join(map(str, args.seeds))}"
               f"{' --quick' if args.quick else ''}{f' --threads {args.threads}' if args.threads else ''}"
               f"{' --model ' + args.model if args.model != 'tiny' else ''}{' --reuse' if args.reuse else ''}"
               f"{' --agent' if args.agent else ''}")
    scored = ("a hello-agents ReActAgent's agent.run against `serve` of each model" if args.agent
              else "greedy, lookup and calculator available")
    block = (f"Measured by `{command}` (held-out, {runs[args.seeds[0]]['grpo']['num_questions']} questions "
             f"about entities never seen in training; {scored}):\n\n{text}\n\n"
              + "\n".join(verdicts) + "\n")
    print(block)
    if args.doc:  # the block, and the runs it is made from (tests/test_readme.py checks that they agree)
        from readme_blocks import write_block

        write_block(block_name, block)
        records = Path(__file__).resolve().parent.parent / "docs" / "runs" / kind.replace("-", "_")
        records.mkdir(parents=True, exist_ok=True)
        for stale in records.glob("seed*.json"):
            stale.unlink()
        for seed, run in runs.items():
            (records / f"seed{seed}.json").write_text(json.dumps(run, indent=2) + "\n")
    (root / "summary.json").write_text(json.dumps({"table": text, "verdicts": verdicts}, indent=2))
    return 0 if all(v.startswith("PASS") for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
