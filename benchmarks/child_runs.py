"""How a benchmark's child process hands back its measurement: one `RESULT <json>` line on stdout."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

PREFIX = "RESULT "


def report(result: dict[str, Any]) -> None:
    """The child's last word: its measurement as one JSON line."""
    print(PREFIX + json.dumps(result), flush=True)


def result_of(done: subprocess.CompletedProcess, what: str) -> dict[str, Any]:
    """The child's measurement, or its output and a SystemExit naming `what` when it failed."""
    line = next((out for out in reversed(done.stdout.splitlines()) if out.startswith(PREFIX)), None)
    if done.returncode or line is None:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-5000:])
        raise SystemExit(f"{what} failed (exit {done.returncode})")
    return json.loads(line.removeprefix(PREFIX))


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)
