"""Error analysis (the book's section 11.5): numerical error, accuracy by reasoning steps, and kinds of mistakes.

Every wrong answer gets exactly one kind, by the first rule that holds (docs/evaluation.md):

1. format        -- the answer is not stated as asked ("Final Answer: <number>", or "Final Answer: <answer>" on a
                    task whose answer may be text), so it may not even be read; or it equals the truth's value in a
                    spelling the task's own checker does not accept.
2. calculation   -- some step "a <op> b = c" in the answer is arithmetically wrong (checked exactly).
3. text          -- the task's answer is not a number (a word, a grid, a move list): the rules below compare
                    numbers and cannot tell more.
4. understanding -- the answer uses none of the numbers the question gives: it solved another problem.
5. reasoning     -- every step is right and it starts from the question's numbers, yet the result is wrong:
                    the plan (which steps, in which order) is wrong.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hello_agents_rl.rewards import arithmetic_steps, count_steps, follows_format, numbers_in, parse_number

ERROR_KINDS = ("format", "calculation", "text", "understanding", "reasoning")


def wrong_steps(completion: str) -> list[str]:
    """The steps "a <op> b = c" whose c is not a <op> b (exact arithmetic; steps it cannot read are skipped)."""
    from hello_agents_rl.rollouts.tool_registry import calculator  # exact and safe: parsed, never eval'd

    wrong = []
    for lhs, rhs in arithmetic_steps(completion):
        expression = lhs.replace("$", "").replace(",", "").replace("x", "*").replace("\u2212", "-")
        stated = parse_number(rhs)
        if "%" in expression or stated is None:
            continue
        try:
            value = parse_number(calculator(expression))
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
        if value is not None and value != stated:
            wrong.append(f"{lhs} = {rhs}")
    return wrong


def error_kind(question: str, completion: str, predicted: Fraction | None, truth: Fraction | None,
               correct: bool | None = None, text_answer: bool = False) -> str | None:
    """The kind of a wrong answer by the rules above; None for a right one. `correct` is the verdict (a task's
    own checker on a reasoning-gym row; without it, the final number equals the truth's); `text_answer`: the
    row's answer may be text, so "Final Answer: <answer>" is its format."""
    if correct is None:
        correct = truth is not None and predicted == truth
    if correct:
        return None
    if not follows_format(completion, text_answer) or (truth is not None and predicted == truth):
        return "format"
    if wrong_steps(completion):
        return "calculation"
    if truth is None:
        return "text"
    given = set(numbers_in(question))
    used = [n for n in numbers_in(completion) if n != predicted]
    if given and not given.intersection(used):
        return "understanding"
    return "reasoning"


def reference_steps(row: Any) -> int | None:
    """Reasoning steps of a question: the computations in its reference solution (GSM8K's annotated steps)."""
    reference = row.get("completion")
    if isinstance(reference, list):
        reference = " ".join(str(m.get("content", "")) for m in reference if isinstance(m, dict))
    return count_steps(reference) if isinstance(reference, str) and reference else None


def error_fields(predicted: Fraction | None, truth: Fraction | None) -> dict[str, float | None]:
    """Absolute and relative error of a readable answer (relative: |p - t| / |t|, None when t is 0)."""
    if predicted is None or truth is None:
        return {"abs_error": None, "rel_error": None}
    error = abs(predicted - truth)
    return {"abs_error": float(error), "rel_error": float(error / abs(truth)) if truth else None}


def analyse(row: Any, completion: str, predicted: Fraction | None, truth: Fraction | None, correct: bool) -> dict[str, Any]:
    text_answer = bool(row.get("task_ref"))  # a reasoning-gym row: its answer may be text
    return {
        "reasoning_steps": reference_steps(row),
        "error_kind": error_kind(str(row.get("question", "")), completion, predicted, truth, correct, text_answer),
    }


def error_summary(details: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean errors of the wrong answers that have a number (None when none has), accuracy by reasoning steps, and
    the count of each kind of mistake."""
    wrong = [d for d in details if not d["correct"]]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    by_steps: dict[int, list[bool]] = {}
    for d in details:
        if d.get("reasoning_steps") is not None:
            by_steps.setdefault(d["reasoning_steps"], []).append(d["correct"])
    return {
        "mean_abs_error_wrong": mean([d["abs_error"] for d in wrong if d["abs_error"] is not None]),
        "mean_rel_error_wrong": mean([d["rel_error"] for d in wrong if d.get("rel_error") is not None]),
        "accuracy_by_steps": {str(steps): sum(c) / len(c) for steps, c in sorted(by_steps.items())},
        "error_kinds": {kind: sum(d.get("error_kind") == kind for d in wrong) for kind in ERROR_KINDS},
    }
