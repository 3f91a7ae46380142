"""Where a demo's time goes: wall and CPU seconds per phase, for results.json."""

from __future__ import annotations

import time


class Clock:
    """Seconds per phase since the last lap. CPU seconds are this process's, every thread's (a served model's, in
    its own process, are not in them); a GRPO phase's budget is counted in them."""

    def __init__(self) -> None:
        self.started = self.last = time.time()
        self.cpu_started = self.cpu_last = time.process_time()
        self.laps: dict[str, float] = {}
        self.cpu_laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now, cpu_now = time.time(), time.process_time()
        self.laps[name] = round(now - self.last, 2)
        self.cpu_laps[name] = round(cpu_now - self.cpu_last, 2)  # as a run's train_cpu_s: rounding keeps their order
        self.last, self.cpu_last = now, cpu_now

    def total(self) -> float:
        return round(time.time() - self.started, 2)

    def cpu_total(self) -> float:
        return round(time.process_time() - self.cpu_started, 2)
