"""The schema of `doctor_thresholds`: the training doctor's thresholds and their defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields

from hello_agents_rl.errors import did_you_mean


@dataclass
class Thresholds:
    """The training doctor's thresholds (`doctor_thresholds`); defaults from the book's section 11.4.3."""

    kl_high: float = 0.5  # the book: above 0.5 the policy drifts
    kl_low: float = 0.001  # the book: below 0.001 the policy barely moves
    patience: int = 3  # consecutive logs a condition must hold
    warmup_logs: int = 2  # KL is 0 at the start by construction; judge "too low" only after this
    flat_window: int = 8
    flat_tolerance: float = 0.01
    collapse_drop: float = 0.2
    slide_window: int = 6  # logs the reward's trend is fitted over (a slow slide, not one bad log)
    slide_drop: float = 0.1  # the fitted fall across that window that counts as a slide
    truncation_rate: float = 0.5
    format_drop: float = 0.2
    tool_failure_rate: float = 0.3  # tools: above this share of failed calls for `patience` logs
    turns_exhausted_rate: float = 0.3  # tools: above this share of rollouts ending on an unanswered call (turns or budget)
    tool_hung_calls: int = 3  # tools: calls of one tool that timed out (tool_timeout) before it is reported
    sft_chance_share: float = 0.5  # SFT: a final loss above this share of a uniform guess's (ln vocabulary) learnt nothing


def thresholds_problem(overrides: dict[str, int | float]) -> str | None:
    """Why `doctor_thresholds` names a threshold the doctor does not have, or None."""
    known = [field.name for field in fields(Thresholds)]
    unknown = sorted(set(overrides) - set(known))
    if not unknown:
        return None
    return f"`doctor_thresholds.{unknown[0]}`: unknown threshold{did_you_mean(unknown[0], known)} (known: {', '.join(known)})"
