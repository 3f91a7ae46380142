"""Error analysis (the book's section 11.5): numerical error, accuracy by reasoning steps, and kinds of mistakes.

Every wrong answer gets exactly one kind, by the first rule that holds (docs/evaluation.md):

1. format        -- the answer is not stated as asked ("Final Answer: <number>"), so it may not even be read.
2. calculation   -- some step "a <op> b = c" in the answer is arithmetically wrong (checked exactly).
3. understanding -- the answer uses none of the numbers the question gives: it solved another problem.
4. reasoning     -- every step is right and it starts from the question's numbers, yet the result is wrong:
                    the plan (which steps, in which order) is wrong.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hello_agents_rl.rewards import arithmetic_steps, count_steps, follows_format, numbers_in, parse_number

ERROR_KINDS = ("format", "calculation", "understanding", "reasoning")


def wrong_steps(completion: str) -> list[str]:
    """The steps "a <op> b = c" whose c is not a <op> b (exact arithmetic; steps it cannot read are skipped)."""
    from hello_agents_rl.rollouts.tools import calculator  # exact and safe: parsed, never eval'd

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


def error_kind(question: str, completion: str, predicted: Fraction | None, truth: Fraction | None) -> str | None:
    """The kind of a wrong answer by the rules above; None for a right one (or an unreadable ground truth)."""
    if truth is None or (predicted is not None and predicted == truth):
        return None
    if not follows_format(completion):
        return "format"
    if wrong_steps(completion):
        return "calculation"
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


def analyse(row: Any, completion: str, predicted: Fraction | None, truth: Fraction | None) -> dict[str, Any]:
    return {
        "reasoning_steps": reference_steps(row),
        "error_kind": error_kind(str(row.get("question", "")), completion, predicted, truth),
    }


def error_summary(details: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean errors of the wrong answers, accuracy by reasoning steps, and the count of each kind of mistake."""
    wrong = [d for d in details if not d["correct"]]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    by_steps: dict[int, list[bool]] = {}
    for d in details:
        if d.get("reasoning_steps") is not None:
            by_steps.setdefault(d["reasoning_steps"], []).append(d["correct"])
    return {
        "mean_abs_error_wrong": mean([d["abs_error"] for d in wrong if d["abs_error"] is not None]) or 0.0,
        "mean_rel_error_wrong": mean([d["rel_error"] for d in wrong if d.get("rel_error") is not None]),
        "accuracy_by_steps": {str(steps): sum(c) / len(c) for steps, c in sorted(by_steps.items())},
        "error_kinds": {kind: sum(d.get("error_kind") == kind for d in wrong) for kind in ERROR_KINDS},
    }
