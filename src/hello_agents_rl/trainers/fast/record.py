"""The fast trainer's record of what ran: counters per path and each fallback with its reason."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class FastPathRecord:
    """What the fast trainer did: counters per path and each fallback with its reason (results.json: fast_path).

    A fallback is warned the first time it happens (printed, and logged where logging is set up), then counted.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.fallbacks: dict[tuple[str, str], int] = {}
        self.skipped: dict[tuple[str, str], int] = {}

    def ran(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def fell_back(self, part: str, reason: str, n: int = 1) -> None:
        if (part, reason) not in self.fallbacks:
            message = f"[fast path] {part}: using TRL's own code ({reason})"
            print(message, flush=True)  # the console a user watches (ConsoleProgress prints there too)
            if log.hasHandlers():  # else logging's last resort would print it a second time, on stderr
                log.warning(message)
        self.fallbacks[(part, reason)] = self.fallbacks.get((part, reason), 0) + n

    def passed_over(self, part: str, reason: str, n: int = 1) -> None:
        """An optional speed-up of ours that did not apply, where another of ours did the work (not TRL's)."""
        self.skipped[(part, reason)] = self.skipped.get((part, reason), 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.counts.get("sampler_completions", 0) > 0,
            # the functional training forward computes each prompt once per group
            "shared_prompt_forward": self.counts.get("functional_train_forwards", 0) > 0,
            "counts": dict(sorted(self.counts.items())),
            "fallbacks": [{"part": p, "reason": r, "times": n} for (p, r), n in self.fallbacks.items()],
            "passed_over": [{"part": p, "reason": r, "times": n} for (p, r), n in self.skipped.items()],
        }
