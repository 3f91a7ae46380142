"""What a job's run leaves on disk, read back: progress from its metrics.jsonl files, its result from the file the
action table names. Never the console text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from hello_agents_rl.config import SearchConfig, TrainConfig
from hello_agents_rl.workflows.actions import ACTIONS

LAST_VALUES = ("reward", "loss", "kl")  # the latest of each, as the book's console line shows them


def progress(row: sqlite3.Row) -> dict[str, Any]:
    """From the newest of the job's metrics.jsonl (the run in progress): step, planned total, latest values;
    the doctor's findings from all of them; and the share of the whole job done (a pipeline's two stages, a
    search's n_trials). Files older than the job belong to an earlier run."""
    pattern = ACTIONS[row["action"]].job.metrics
    runs = sorted((p for p in Path(row["output_dir"] or "").glob(pattern) if _mtime(p) >= row["created"]), key=_mtime)
    entries = [_entries(path) for path in runs]
    current = [e for e in (entries[-1] if entries else []) if "train_runtime" not in e and not _is_eval(e)]
    last = current[-1] if current else {}
    max_steps, num_epochs, planned_runs = _planned(row["action"], json.loads(row["params"]))
    progress: dict[str, Any] = {"step": int(last.get("step", 0)), "total": max_steps,
                                **{key: last[key] for key in LAST_VALUES if key in last}, "diagnostics": []}
    for entry in (e for run in entries for e in run):
        progress["diagnostics"] += [d for d in entry.get("diagnostics", []) if d not in progress["diagnostics"]]
    epoch = last.get("epoch")
    if max_steps:
        run_done = min(progress["step"] / max_steps, 1.0)
    else:  # trained by epochs: the logged epoch says how far
        run_done = min(epoch / num_epochs, 1.0) if isinstance(epoch, (int, float)) else 0.0
    finished_runs = max(len(runs) - 1, 0)  # every run before the newest one has ended
    progress["fraction"] = round(min((finished_runs + run_done) / planned_runs, 1.0), 4)
    return progress


def _planned(action: str, params: dict[str, Any]) -> tuple[int | None, float, int]:
    """Each run's max_steps (None when it trains by epochs) and num_epochs as the job was given them, and how
    many training runs the job makes (a search's every worker counts towards its n_trials)."""
    run = params.get("base", {}) if action == "search" else params
    max_steps = run.get("max_steps", -1)
    num_epochs = run.get("num_epochs", TrainConfig.model_fields["num_epochs"].default)
    trials = params.get("n_trials", SearchConfig.model_fields["n_trials"].default)
    runs = {"pipeline": 2, "search": trials}.get(action, 1)
    return (max_steps if isinstance(max_steps, int) and max_steps > 0 else None), float(num_epochs), int(runs)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed as we looked (an overwrite_output_dir run clears the old files)
        return 0.0


def _entries(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the line being written as we read
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def _is_eval(entry: dict[str, Any]) -> bool:
    return any(key.startswith("eval_") for key in entry)


def saved_result(row: sqlite3.Row) -> dict[str, Any] | None:
    """The result file the action table names, if this job wrote it (an older run's file is not its result)."""
    file = Path(row["output_dir"] or "") / ACTIONS[row["action"]].job.result
    if not file.is_file() or file.stat().st_mtime < row["created"]:
        return None
    try:
        result = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None
