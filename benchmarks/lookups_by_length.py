"""Right answers by chain length in finished lookups demos: where GRPO's gain (or its absence) comes from.

    python benchmarks/lookups_by_length.py outputs/demo_lookups_smollm2_seeds/seed0 [more demo folders]

Reads each demo's sft/ and grpo/ held-out answers (eval_details.jsonl; the agent demo's agent_details.jsonl) and
prints, per seed folder, right / asked for the 2-, 3- and 4-call questions, SFT then GRPO.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hello_agents_rl.tasks.lookups import chain_of


def by_length(details: Path) -> dict[int, list[int]]:
    counts: dict[int, list[int]] = {}
    for line in details.read_text().splitlines():
        row = json.loads(line)
        chain = chain_of(row["question"])
        tally = counts.setdefault(len(chain.calls) if chain else 0, [0, 0])
        tally[0] += bool(row["correct"])
        tally[1] += 1
    return dict(sorted(counts.items()))


def details_file(run: Path) -> Path:
    """The plain demo's eval_details.jsonl, else the agent demo's agent_details.jsonl."""
    plain = run / "eval_details.jsonl"
    return plain if plain.is_file() else run / "agent_details.jsonl"


def main() -> int:
    for folder in map(Path, sys.argv[1:]):
        cells = [f"{key} " + " ".join(f"{n}-call {right}/{asked}" for n, (right, asked) in
                                      by_length(details_file(folder / key)).items()) for key in ("sft", "grpo")]
        print(f"{folder.name}: " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
