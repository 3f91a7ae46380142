"""Paired comparisons of two models on the same questions: the gain, its bootstrap interval, McNemar's test.

Hand-written because the whole need is a dozen lines of numpy; scipy (whose `stats.bootstrap` would do) is not a
dependency of this package.
"""

from __future__ import annotations

import math

import numpy as np


def paired_interval(a: list[bool], b: list[bool], resamples: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """mean(b) - mean(a) on the same questions, and its 95% paired-bootstrap interval (percentile)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equal, non-empty lists of per-question results, got {len(a)} and {len(b)}")
    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)  # (questions,)
    picks = np.random.default_rng(seed).integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[picks].mean(axis=1)  # (resamples,)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diffs.mean()), float(low), float(high)


def paired_gain(before: list[dict], after: list[dict]) -> dict:
    """`after` - `before` on the questions both answered (detail rows with `question` and `correct`): the gain in
    points, its 95% paired-bootstrap interval, and how many questions it is over."""
    if [row["question"] for row in before] == [row["question"] for row in after]:  # one list, asked twice: by row
        pairs = [(x["correct"], y["correct"]) for x, y in zip(before, after)]  # (a question drawn twice counts twice)
    else:
        a = {row["question"]: row["correct"] for row in before}
        b = {row["question"]: row["correct"] for row in after}
        pairs = [(a[q], b[q]) for q in sorted(a.keys() & b.keys())]
    gain, low, high = paired_interval([x for x, _ in pairs], [y for _, y in pairs])
    return {"points": round(100 * gain, 1), "interval": [round(100 * low, 1), round(100 * high, 1)],
            "questions": len(pairs)}


def mcnemar_p(a: list[bool], b: list[bool]) -> float:
    """Exact two-sided McNemar test: of the questions where the two differ, is the split 50/50?"""
    gained = sum(1 for x, y in zip(a, b) if y and not x)
    lost = sum(1 for x, y in zip(a, b) if x and not y)
    n, k = gained + lost, min(gained, lost)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)
