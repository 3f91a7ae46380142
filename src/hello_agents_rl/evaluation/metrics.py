"""What evaluation reports, read from rollouts: per question, summed up, and as a comparison table.

docs/evaluation.md says what each number means; the tool columns appear when the questions had tools.
"""

from __future__ import annotations

import math
from typing import Any

from hello_agents_rl.evaluation.analysis import analyse, error_fields, error_summary
from hello_agents_rl.rewards import extract_answer, follows_format, is_correct, parse_ground_truth
from hello_agents_rl.rewards.correctness import text_answer
from hello_agents_rl.rollouts.loop import Rollout
from hello_agents_rl.trajectory import TrajectoryGroup


def pass_at(n: int, correct: int, k: int) -> float:
    """The unbiased pass@k from n samples of which `correct` passed (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    return 1.0 if n - correct < k else 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def question_details(row: Any, answer: Rollout, samples: list[Rollout], with_tools: bool,
                     checker: str = "number", task: Any = None) -> dict[str, Any]:
    """One question: its greedy trajectory (the answer is read after the last tool result) and its samples;
    right or wrong as the task says where it owns its reward, else as `checker` (the reward's answer_checker)."""
    trajectory = answer.trajectory
    text = trajectory.final_text
    predicted, truth = extract_answer(text), parse_ground_truth(row["ground_truth"])
    task_ref = row.get("task_ref")  # a reasoning-gym row: its task's own checker decides, and the answer may be text

    def right(rollout: Rollout) -> bool:
        verdict = task.is_right(rollout.trajectory.final_text, dict(row), rollout.messages if with_tools else None
                                ) if task is not None else None
        if verdict is not None:
            return verdict
        return is_correct(rollout.trajectory.final_text, row["ground_truth"], task_ref, checker)

    group = TrajectoryGroup(tuple(s.trajectory for s in samples), tuple(float(right(s)) for s in samples))
    correct = right(answer)  # an unreadable answer or truth never passes
    return {
        "question": row.get("question", ""),
        "ground_truth": row["ground_truth"],
        "completion": text,
        "predicted": text_answer(text) if task_ref else None if predicted is None else str(predicted),
        "correct": correct,
        "samples_correct": group.passed,
        "pass_at_k": group.passed > 0,
        "follows_format": follows_format(text, bool(task_ref)),
        "num_tokens": answer.answer_tokens,
        "truncated": answer.truncated,
        **error_fields(predicted, truth),
        **analyse(row, text, predicted, truth, correct),
        **({"transcript": answer.messages, **trajectory.stats()} if with_tools else {}),
        **({"carry": row["carry"]} if "carry" in row else {}),
    }


def summarise(details: list[dict[str, Any]], k: int, elapsed: float, with_tools: bool) -> dict[str, Any]:
    n = max(len(details), 1)
    return {
        "num_questions": len(details),
        "accuracy": sum(d["correct"] for d in details) / n,
        **{f"pass_at_{j}": sum(pass_at(k, d["samples_correct"], j) for d in details) / n for j in range(1, k + 1)},
        "format_rate": sum(d["follows_format"] for d in details) / n,
        **(tool_summary(details) if with_tools else {}),
        "mean_tokens": sum(d["num_tokens"] for d in details) / n,
        **error_summary(details),
        "truncation_rate": sum(d["truncated"] for d in details) / n,
        "seconds_per_question": elapsed / n,
        "details": details,
    }


def tool_summary(details: list[dict[str, Any]]) -> dict[str, float]:
    n = max(len(details), 1)
    calls = sum(d["calls"] for d in details)
    return {
        "tool_call_rate": sum(d["calls"] > 0 for d in details) / n,
        "failed_call_rate": sum(d["failed_calls"] for d in details) / calls if calls else 0.0,
        "mean_calls": calls / n,
        "turns_exhausted_rate": sum(d["turns_exhausted"] for d in details) / n,
    }


TOOL_COLUMNS = [("tool_call_rate", "Tool calls", "{:.1%}"), ("failed_call_rate", "Failed calls", "{:.1%}"),
                ("mean_calls", "Calls/question", "{:.2f}"), ("turns_exhausted_rate", "Out of turns", "{:.1%}")]


def comparison_markdown(table: list[dict[str, Any]], k: int = 1) -> str:
    """One row per model; the tool columns beside accuracy when the models were evaluated with tools."""
    tools = TOOL_COLUMNS if table and "tool_call_rate" in table[0] else []
    columns = [("accuracy", "Accuracy (greedy)", "{:.1%}"), (f"pass_at_{k}", f"Pass@{k}", "{:.1%}"),
               ("format_rate", "Format", "{:.1%}"), *tools, ("mean_tokens", "Tokens", "{:.1f}"),
               ("truncation_rate", "Truncated", "{:.1%}"), ("mean_abs_error_wrong", "Abs. error (wrong)", "{:.2f}"),
               ("seconds_per_question", "s/question", "{:.3f}")]
    lines = ["| Model | " + " | ".join(c[1] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in table:  # a number with no value (no wrong answer had one) shows as a dash
        cells = ["-" if row[key] is None else fmt.format(row[key]) for key, _, fmt in columns]
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
