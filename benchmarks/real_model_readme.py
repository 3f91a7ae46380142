"""The README's "real model on a laptop" block, from the real-model benchmarks' own results.

    python benchmarks/real_model_readme.py --record   # the learning run's results -> docs/real_model.json, the README
    python benchmarks/real_model_readme.py            # docs/real_model.json -> the README block only
The issue-19 benchmarks (demo_seeds.py --model smollm2, demo_tools_seeds.py --model smollm2, real_model_task.py,
lora_lr_search.py) record their rows themselves with `update_record` when run with --doc/--readme.
tests/test_readme.py fails when the README block and docs/real_model.json disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real_model.md"
RECORD = ROOT / "docs" / "real_model.json"
LEARNING = ROOT / "outputs" / "real_model_learning" / "results.json"


def record(learning: dict) -> dict:
    """What the README quotes, kept beside the docs (outputs/ is not committed). The speed table is
    speed_readme.py's."""
    return {
        "learning": {
            "command": learning["command"], "model": learning["model"], "task": learning["task"],
            "num_questions": learning["num_questions"], "wall_s": learning["wall_s"],
            **{stage: round(learning[stage]["accuracy"], 4) for stage in ("base", "sft", "grpo")},
            "comparisons": learning["comparisons"],
        },
    }


def update_record(key: str, value: dict) -> None:
    """One benchmark's figures into docs/real_model.json, then the README block anew from all of them."""
    from readme_blocks import write_block

    recorded = json.loads(RECORD.read_text())
    recorded.setdefault("beyond_demonstrations", {})[key] = value
    RECORD.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    write_block("real-model", render_readme(recorded))


def record_seeds(key: str, script: str, rows: list[dict], command: str, block: str) -> None:
    """A seeds benchmark's rows into the README table (`update_record`), and its block into docs/real_model.md
    between its `<key>-seeds` markers."""
    from real_model_common import write_block

    update_record(key, {"command": command, "runs": rows})
    write_block(DOC, block, (f"<!-- {key}-seeds:begin (benchmarks/{script} --model smollm2 writes this block) -->",
                             f"<!-- {key}-seeds:end -->"))


BEYOND = {  # recorded key -> what the row shows (the order of the README's table)
    "demo": "`make demo-real`: A + B, SFT on a demonstrator that forgets the carry, then GRPO",
    "tools": "`demo --task tools --model smollm2`: 3-digit x 2-digit, SFT calls the calculator sometimes, then GRPO",
    "agent": "`demo --task agent --model smollm2`: a hello-agents SimpleAgent with a calculator Tool, SFT then GRPO on "
             "the agent, scored by agent.run against `serve`",
    "task": "reasoning-gym task, GRPO from the base model",
}


def render_beyond(rows: dict) -> str:
    """The issue-19 table: RL past its starting point on a real model, every figure with its command."""
    lines = ["GRPO beyond its starting point on SmolLM2-135M-Instruct (LoRA, 2 CPU cores; held-out questions, greedy):",
             "",
             "| run (command below) | start | after GRPO | GRPO gain, points [95% paired interval] | wall per run |",
             "|---|---:|---:|---|---:|"]
    for key, label in BEYOND.items():
        for run in rows.get(key, {}).get("runs", []):
            lines.append(f"| {label}{run.get('label', '')} | {run['start']:.1%} | {run['after']:.1%} | "
                         f"{run['gain']:+.1f} [{run['interval'][0]:+.1f}, {run['interval'][1]:+.1f}] | "
                         f"{run['wall_s'] / 60:.1f} min |")
    commands = [f"`{rows[key]['command']}`" for key in BEYOND if key in rows]
    return "\n".join(lines) + "\n\nCommands: " + "; ".join(commands) + ". Per-seed figures: docs/real_model.md.\n\n"


def render_readme(recorded: dict) -> str:
    """One story: the runs where GRPO starts from a model that still errs (the demo and its seeds), every figure
    with its command. The first real-model run (SFT on correct demonstrations, which left GRPO nothing to fix) is
    docs/real_model.md's, with the reading of its figures, not the README's."""
    beyond = render_beyond(recorded["beyond_demonstrations"]) if recorded.get("beyond_demonstrations") else ""
    return beyond + (
        "GRPO adds what SFT left undone: here the demonstrator forgets the carry, so the SFT model errs where a carry "
        "is needed and GRPO's reward teaches it. Where SFT already solves the task, GRPO has nothing to fix "
        "(docs/real_model.md: \"The first real-model runs\" reads that run's figures).\n\n"
        "Speed and memory of a GRPO step on this model against plain TRL: [Performance](#performance).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help=f"read {LEARNING.relative_to(ROOT)} into "
                        f"{RECORD.relative_to(ROOT)} first")
    args = parser.parse_args()
    if args.record:
        recorded = {**json.loads(RECORD.read_text()), **record(json.loads(LEARNING.read_text()))}
        RECORD.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    sys.path.insert(0, str(ROOT / "src"))
    from readme_blocks import write_from_record

    print(write_from_record("real-model", render_readme, RECORD))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
