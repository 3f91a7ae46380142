"""GRPO on a reasoning-gym task, on SmolLM2-135M-Instruct, from the base model (issue 19, item 4).

    python benchmarks/real_model_task.py [--task gcd] [--config '{"max_value": 20}'] [--steps 40] [--seed 0]
                                         [--out outputs/real_model_task] [--doc docs/real_model.md] [--threads 2]

A task no one here wrote: reasoning-gym's generator makes the questions and its own `score_answer` scores them,
in the reward and in the evaluation. The start is the base model (no SFT: the task has no demonstrations here),
and the tool's system prompt asks for `Final Answer: <answer>`. Stages, each through RLTrainingTool as a user
calls it:
  0. evaluate the base model, greedy, on the task's held-out split (250 questions, generator seeds disjoint
     from training, no question text shared);
  1. GRPO with LoRA, reward `accuracy` (the task's checker), `--steps` x 4 prompts x 8 completions;
  2. evaluate the GRPO model on the same questions; paired 95% bootstrap interval and McNemar p for GRPO - base.
Targets: GRPO - base >= +10 points with the interval above 0, <= 20 minutes wall for the whole script.
`--doc` writes the figures into docs/real_model.md (between the task markers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from real_model_common import smollm2_gguf, write_block

from hello_agents_rl.evaluation.stats import mcnemar_p, paired_interval

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real_model.md"
MARKERS = ("<!-- task:begin (benchmarks/real_model_task.py writes this block) -->", "<!-- task:end -->")
TARGETS = {"min_gain": 10.0, "min_interval_low": 0.0, "max_wall_s": 1200.0}
EVAL_QUESTIONS = 250


def run(tool: Any, params: dict[str, Any]) -> dict[str, Any]:
    started = time.time()
    result = tool.run(params)
    if result.get("status") != "completed":
        sys.exit(f"{params['action']} failed: {json.dumps(result, default=str)[:2000]}")
    result["wall_s"] = round(time.time() - started, 1)
    return result


def evaluate(tool: Any, model: str, args: argparse.Namespace) -> dict[str, Any]:
    return run(tool, {
        "action": "evaluate", "model_path": model, "dataset": f"reasoning_gym:{args.task}",
        "dataset_config": {**args.config, "size": EVAL_QUESTIONS}, "split": "test", "max_samples": None,
        "max_new_tokens": args.eval_tokens, "batch_size": 50, "return_details": True,
    })


def answers(details: list[dict[str, Any]]) -> str:
    """The most frequent predictions: a gain that is one repeated guess shows here."""
    common = Counter(str(d.get("predicted")) for d in details).most_common(4)
    return ", ".join(f"{value!r} x{count}" for value, count in common)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="gcd")
    parser.add_argument("--config", type=json.loads, default={"max_value": 20}, help="the generator's parameters")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=0.7,
                        help="sampling temperature in GRPO (at 1.0 the base model's samples were right a third as often "
                             "as its greedy answers: most groups all wrong, no signal)")
    parser.add_argument("--train-tokens", type=int, default=48)
    parser.add_argument("--eval-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="outputs/real_model_task")
    parser.add_argument("--doc", default="", help="write the figures into this doc and the README's table")
    parser.add_argument("--render", default="", help="only write --doc from a finished run's figures.json")
    args = parser.parse_args()
    if args.render:
        return record(json.loads(Path(args.render).read_text()), args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from hello_agents_rl.interfaces.tool import RLTrainingTool

    started = time.time()
    tool, base_model, out = RLTrainingTool(), smollm2_gguf(), Path(args.out)
    base = evaluate(tool, base_model, args)
    batch, generations = 4, 8
    grpo = run(tool, {
        "action": "train", "algorithm": "grpo", "model_name": base_model, "output_dir": str(out / "grpo"),
        "dataset": f"reasoning_gym:{args.task}", "dataset_config": {**args.config, "size": args.steps * batch},
        "max_steps": args.steps, "batch_size": batch, "num_generations": generations, "use_lora": True,
        "learning_rate": args.learning_rate, "lr_scheduler_type": "linear", "warmup_ratio": 0.1,
        "temperature": args.temperature, "max_new_tokens": args.train_tokens, "reward_type": "accuracy", "seed": args.seed,
        "save_steps": 10_000, "logging_steps": 5, "report_to": "none", "overwrite_output_dir": True,
    })
    after = evaluate(tool, grpo["model_path"], args)
    wall = time.time() - started

    before_rows = {d["question"]: d["correct"] for d in base["details"]}
    after_rows = {d["question"]: d["correct"] for d in after["details"]}
    questions = sorted(before_rows.keys() & after_rows.keys())
    a, b = [before_rows[q] for q in questions], [after_rows[q] for q in questions]
    gain, low, high = (100 * x for x in paired_interval(a, b))
    figures = {
        "task": args.task, "config": args.config, "seed": args.seed, "questions": len(questions),
        "base_accuracy": base["accuracy"], "grpo_accuracy": after["accuracy"],
        "base_format_rate": base["format_rate"], "grpo_format_rate": after["format_rate"],
        "gain_points": round(gain, 1), "interval": [round(low, 1), round(high, 1)],
        "mcnemar_p": mcnemar_p(a, b), "grpo_s": grpo["wall_s"], "wall_s": round(wall, 1),
        "cpu_s": round(sum(os.times()[:4]), 1), "final_kl": grpo.get("final_kl"),
        "base_answers": answers(base["details"]), "grpo_answers": answers(after["details"]),
        "doctor": grpo.get("diagnostics", []),
    }
    figures["verdicts"] = verdicts(figures)
    (out / "figures.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print("\n".join(figures["verdicts"]))
    return record(figures, args)


def verdicts(f: dict[str, Any]) -> list[str]:
    checks = [
        (f"GRPO - base >= +{TARGETS['min_gain']:.0f} points", f["gain_points"] >= TARGETS["min_gain"]),
        ("95% paired interval above 0", f["interval"][0] > TARGETS["min_interval_low"]),
        (f"wall time <= {TARGETS['max_wall_s']:.0f} s", f["wall_s"] <= TARGETS["max_wall_s"]),
    ]
    return [f"{'PASS' if ok else 'FAIL'} {name}" for name, ok in checks]


def record(figures: dict[str, Any], args: argparse.Namespace) -> int:
    """The doc's block and the README's row, from one run's figures."""
    from real_model_readme import update_record

    if "verdicts" not in figures:  # a figures.json written before verdicts were kept in it
        figures["verdicts"] = verdicts(figures)
    if args.doc:
        write_block(Path(args.doc), block(figures, args), MARKERS)
        update_record("task", {"command": command(figures, args), "runs": [{
            "label": f" (`{figures['task']}`; accuracy over the 250 held-out rows, the gain over its "
                     f"{figures['questions']} distinct questions)", "start": figures["base_accuracy"], "after": figures["grpo_accuracy"],
            "gain": figures["gain_points"], "interval": figures["interval"], "wall_s": figures["wall_s"]}]})
    return 0 if all(line.startswith("PASS") for line in figures["verdicts"]) else 1


def command(f: dict[str, Any], args: argparse.Namespace) -> str:
    return (f"python benchmarks/real_model_task.py --task {f['task']} --config '{json.dumps(f['config'])}' "
            f"--steps {args.steps} --temperature {args.temperature:g} --seed {f['seed']} --doc docs/real_model.md")


def block(f: dict[str, Any], args: argparse.Namespace) -> str:
    return "\n".join([
        "## A reasoning-gym task from the base model (figures written by the script)",
        "",
        f"`{command(f, args)}` (2 cores, {f['wall_s']:.0f} s wall, {f['cpu_s']:.0f} s CPU, GRPO {f['grpo_s']:.0f} s):",
        "",
        f"| reasoning_gym:{f['task']} {json.dumps(f['config'])}: {EVAL_QUESTIONS} held-out rows, greedy | accuracy | "
        "format | most frequent answers |",
        "|---|---:|---:|---|",
        f"| base SmolLM2-135M-Instruct | {f['base_accuracy']:.1%} | {f['base_format_rate']:.1%} | {f['base_answers']} |",
        f"| after GRPO (LoRA, {args.steps} steps of 4 x 8) | {f['grpo_accuracy']:.1%} | {f['grpo_format_rate']:.1%} "
        f"| {f['grpo_answers']} |",
        "",
        f"GRPO - base on the {f['questions']} distinct questions among them (a generator may repeat a question; none "
        f"is in the training split): **{f['gain_points']:+.1f} points**, 95% paired interval [{f['interval'][0]:+.1f}, "
        f"{f['interval'][1]:+.1f}], McNemar p = {f['mcnemar_p']:.2g}; final KL {f['final_kl']:.3g}; "
        f"doctor: {'; '.join(f['doctor']) or 'no findings'}.",
        "",
        *f["verdicts"],
    ])


if __name__ == "__main__":
    raise SystemExit(main())
