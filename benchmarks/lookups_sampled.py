"""How often a finished agent-lookups demo's models get a chain right when *sampled*, as GRPO's rollouts are.

    python benchmarks/lookups_sampled.py outputs/agls/seed2 [--length 4] [--questions 16] [--samples 4]
                                         [--temperature 0.7]

The demo scores its models greedily, so a chain that GRPO's samples sometimes finish still counts as wrong. This
serves the demo's SFT and GRPO models in turn and runs its ReActAgent `--samples` times, at GRPO's sampling
temperature, on the first `--questions` held-out questions of one chain length: right / runs for each model. A
chain length that SFT almost never samples right gives GRPO almost nothing to reinforce. Run it with a Python that
has hello-agents.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hello_agents_rl.tasks import lookups
from hello_agents_rl.workflows.demo_agent import ask_all, held_out_rows
from hello_agents_rl.workflows.demo_tool_use import Recipe
from hello_agents_rl.workflows.serve import running, served_model_id


def sampled_right(model_path: Path, questions: list[dict], recipe: Recipe, samples: int, temperature: float,
                  scratch: Path) -> tuple[int, int]:
    with running(str(model_path), batching=True) as base_url:
        model = served_model_id(base_url)
        right = sum(d["correct"] for d in ask_all(base_url, model, [row for row in questions for _ in range(samples)],
                                                  recipe, scratch, temperature))
    return right, len(questions) * samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo", type=Path, help="a finished `demo --task agent-lookups` folder")
    parser.add_argument("--length", type=int, default=4, help="chain length of the questions (2, 3 or 4)")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4, help="agent runs per question")
    parser.add_argument("--temperature", type=float, default=None, help="default: the recipe's GRPO temperature")
    args = parser.parse_args()
    results = json.loads((args.demo / "results.json").read_text())
    if results.get("task") != "agent-lookups":
        parser.error(f"{args.demo} is not a finished agent-lookups demo (its results.json task: {results.get('task')})")
    recipe = Recipe(**results["recipe"])
    temperature = recipe.temperature if args.temperature is None else args.temperature
    held_out = held_out_rows(recipe)  # the questions the demo scored
    questions = [row for row in held_out if len(getattr(lookups.chain_of(row["question"]), "calls", ())) == args.length]
    questions = questions[:args.questions]
    print(f"{args.demo}: {len(questions)} held-out {args.length}-call questions x {args.samples} agent runs at "
          f"temperature {temperature:g}", flush=True)
    for phase in ("sft", "grpo"):
        right, runs = sampled_right(args.demo / phase / "model", questions, recipe, args.samples, temperature,
                                    args.demo / phase)
        print(f"{phase}: {right}/{runs} right ({right / max(runs, 1):.1%})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
