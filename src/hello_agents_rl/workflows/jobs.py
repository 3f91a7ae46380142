"""Background jobs: `train`, `pipeline` and `search` as child processes, their records in SQLite.

A job is `python -m hello_agents_rl <action> --config <job folder>/config.json`, so it is exactly what a
person would run, and cancelling it is the CLI's own Ctrl-C path (SIGINT: checkpoint, results.json with
status "interrupted"). The store keeps the child's pid and process start time: a server restarted later
still knows every job, and a job whose process is gone without a result is failed, never running forever.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil

from hello_agents_rl.workflows import actions
from hello_agents_rl.errors import ConfigError

JOB_ACTIONS = ("train", "pipeline", "search")
FINAL = ("completed", "interrupted", "failed", "cancelled")
STORE = "jobs.db"
_STEP = re.compile(r"Step (\d+)/(\d+)")

_SCHEMA = """CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, action TEXT NOT NULL, params TEXT NOT NULL, output_dir TEXT, folder TEXT NOT NULL,
    pid INTEGER, started REAL, created REAL NOT NULL, state TEXT NOT NULL, finished REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT, mark TEXT)"""


class JobManager:
    """Start, watch, cancel and collect background jobs; every record lives in `<folder>/jobs.db`."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser().resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._children: dict[str, subprocess.Popen] = {}  # ours to reap; a restarted server has none
        with self._db() as db:
            db.execute("PRAGMA journal_mode=WAL")  # the server writes while a CLI or a second server reads
            db.execute(_SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One short transaction: committed (or rolled back) and closed, so no thread holds the file."""
        db = sqlite3.connect(self.folder / STORE, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            with db:
                yield db
        finally:
            db.close()

    # -- calls --------------------------------------------------------------------------------------------

    def start(self, params: dict[str, Any]) -> dict[str, Any]:
        """Validate, then start the job and return at once with its id (nothing touches the disk if invalid)."""
        action = params.get("action", "train") if isinstance(params, dict) else None
        if action not in JOB_ACTIONS:
            raise ConfigError(f"`action`: {action!r} does not run as a job; jobs run {', '.join(JOB_ACTIONS)} "
                              "(the other actions return at once: call them directly)")
        _require_json(params)
        cfg = actions.parse(params)
        if action == "train":  # the run's own folder check (finished run, unfinished one to resume): refused now
            from hello_agents_rl.outputs import plan_output_dir

            plan_output_dir(cfg.output_dir, cfg.resume_from_checkpoint, cfg.overwrite_output_dir)
        output_dir = str(Path(cfg.output_dir).expanduser().resolve())
        busy = [r["id"] for r in self._rows() if r["output_dir"] == output_dir and self._refresh(r)["state"] not in FINAL]
        if busy:
            raise ConfigError(f"`output_dir`: job {busy[0]} is already writing to {output_dir}; "
                              "wait for it, cancel it, or choose another output_dir")
        job_id = f"{action}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        folder = self.folder / job_id
        folder.mkdir()
        config = folder / "config.json"
        config.write_text(json.dumps({**params, "action": action}, indent=2), encoding="utf-8")
        created = time.time()  # before the child exists: whatever it writes is newer than this
        with (folder / "console.log").open("wb") as out, (folder / "stderr.log").open("wb") as err:
            child = subprocess.Popen(
                self._command(action, config), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True,  # the server's own Ctrl-C must not reach the jobs; cancel is explicit
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # console lines reach the log as they happen
            )
        self._children[job_id] = child
        with self._db() as db:
            db.execute("INSERT INTO jobs (id, action, params, output_dir, folder, pid, started, created, state) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running')",
                       (job_id, action, config.read_text(), output_dir, str(folder), child.pid,
                        _create_time(child.pid), created))
        return self.status(job_id)

    def status(self, job_id: str) -> dict[str, Any]:
        """State, step/total, the latest console line, the doctor's findings and an ETA."""
        return self._refresh(self._row(job_id))

    def list(self) -> list[dict[str, Any]]:
        return [self._refresh(row) for row in self._rows()]

    def cancel(self, job_id: str) -> dict[str, Any]:
        """SIGINT, as Ctrl-C: the run saves a checkpoint after this step and ends "interrupted"."""
        row = self._row(job_id)
        if self._alive(row):
            os.kill(row["pid"], signal.SIGINT)
            with self._db() as db:
                db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
        return self.status(job_id)

    def result(self, job_id: str) -> dict[str, Any]:
        """The final result dict, as the CLI printed it; an error while the job still runs."""
        status = self.status(job_id)
        if status["state"] not in FINAL:
            where = f" (step {status['step']}/{status['total']})" if status.get("total") else ""
            raise ConfigError(f"`job_id`: job {job_id} is still {status['state']}{where}; poll its status until it ends")
        stored = self._row(job_id)["result"]
        if stored:
            return json.loads(stored)
        return {"status": status["state"], "error": status.get("error", ""), "job_id": job_id}

    def wait(self, job_id: str, timeout: float = 600, poll: float = 1.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (status := self.status(job_id))["state"] not in FINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {status['state']} after {timeout} s")
            time.sleep(poll)
        return status

    # -- internals ----------------------------------------------------------------------------------------

    def _command(self, action: str, config: Path) -> list[str]:
        return [sys.executable, "-m", "hello_agents_rl", action.replace("_", "-"), "--config", str(config)]

    def _rows(self) -> list[sqlite3.Row]:
        with self._db() as db:
            return db.execute("SELECT * FROM jobs ORDER BY created").fetchall()

    def _row(self, job_id: str) -> sqlite3.Row:
        with self._db() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            known = [r["id"] for r in self._rows()][-5:]
            raise ConfigError(f"`job_id`: no job {job_id!r} in {self.folder}" + (f" (latest: {', '.join(known)})" if known else ""))
        return row

    def _alive(self, row: sqlite3.Row) -> bool:
        """Our child, by pid *and* start time: a reused pid is another program, not this job."""
        child = self._children.get(row["id"])
        if child is not None:
            return child.poll() is None
        try:
            process = psutil.Process(row["pid"])
            return (row["started"] is not None and abs(process.create_time() - row["started"]) < 1.0
                    and process.status() != psutil.STATUS_ZOMBIE)
        except (psutil.Error, TypeError):
            return False

    def _refresh(self, row: sqlite3.Row) -> dict[str, Any]:
        folder = Path(row["folder"])
        progress = _progress(folder / "console.log")
        state = row["state"]
        info: dict[str, Any] = {"job_id": row["id"], "action": row["action"], "output_dir": row["output_dir"],
                                "console": str(folder / "console.log"), "pid": row["pid"], **progress}
        if state not in FINAL:
            if self._alive(row):
                state = "cancelling" if row["cancel_requested"] else "running"
                info["eta_s"] = self._eta(row, progress)
            else:
                state = self._finish(row, progress)
        info["state"] = state
        if state in FINAL:
            final = self._row(row["id"])
            info["elapsed_s"] = round((final["finished"] or time.time()) - final["created"], 1)
            if final["error"]:
                info["error"] = final["error"]
        else:
            info["elapsed_s"] = round(time.time() - row["created"], 1)
        return info

    def _finish(self, row: sqlite3.Row, progress: dict[str, Any]) -> str:
        """The process is gone: its printed result decides; no result means it failed (or was cancelled early)."""
        child = self._children.pop(row["id"], None)
        result = _printed_result(Path(row["folder"]) / "console.log") or _saved_result(row)
        error = None
        if result is not None:
            state = {"completed": "completed", "interrupted": "interrupted", "failed": "failed"}.get(
                str(result.get("status", "completed")), "failed")
            error = result.get("error")
        elif row["cancel_requested"] and _ended_by_interrupt(child, Path(row["folder"]) / "stderr.log"):
            state, error = "cancelled", "cancelled before training started; nothing to checkpoint"
        else:  # a crash stays a crash, even one after a cancel
            state = "failed"
            last = f" after step {progress['step']}/{progress['total']}" if progress.get("total") else " before its first step"
            tail = _tail(Path(row["folder"]) / "stderr.log", 6)
            error = f"the process ended without a result{last}" + (f":\n{tail}" if tail else " (killed?)")
        with self._db() as db:
            db.execute("UPDATE jobs SET state = ?, finished = ?, result = ?, error = ? WHERE id = ? AND state = ?",
                       (state, time.time(), json.dumps(result) if result is not None else None, error,
                        row["id"], row["state"]))
        return state

    def _eta(self, row: sqlite3.Row, progress: dict[str, Any]) -> float | None:
        """Seconds left at the rate seen since the first step this store observed (model loading excluded)."""
        step, total = progress.get("step"), progress.get("total")
        if not step or not total:
            return None
        now = time.time()
        if not row["mark"]:
            with self._db() as db:
                db.execute("UPDATE jobs SET mark = ? WHERE id = ?", (f"{step}@{now}", row["id"]))
            rate = step / max(now - row["created"], 1e-6)  # first look: loading counted, a pessimistic guess
        else:
            first, _, when = row["mark"].partition("@")
            done, spent = step - int(first), now - float(when)
            rate = done / spent if done > 0 and spent > 0 else step / max(now - row["created"], 1e-6)
        return round(max(total - step, 0) / rate, 1) if rate > 0 else None


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _require_json(params: Any) -> None:
    """A job's parameters go to a config file: Python objects (a Dataset, a callable) cannot."""
    if not isinstance(params, dict):
        raise ConfigError(f"parameters must be a dict, got {type(params).__name__}")
    for key, value in params.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ConfigError(f"`{key}`: {type(value).__name__} cannot be passed to a background job; give its JSON "
                              "form (a dataset file or name, a reward name, an import string 'pkg.module:name')") from None


def _lines(path: Path, limit: int = 1 << 20) -> list[str]:
    if not path.is_file():
        return []
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - limit))
        text = handle.read().decode("utf-8", "replace")
    return [part.strip() for line in text.splitlines() for part in line.split("\r") if part.strip()]


def _console_part(lines: list[str]) -> list[str]:
    """The console lines before the CLI's final JSON (printed with indent=2: its first line is a lone "{")."""
    start = max((i for i, line in enumerate(lines) if line == "{"), default=None)
    return lines[:start] if start is not None and lines[-1] == "}" else lines


def _progress(console: Path) -> dict[str, Any]:
    lines = _console_part(_lines(console))
    progress: dict[str, Any] = {"step": 0, "total": None, "line": lines[-1] if lines else "", "diagnostics": []}
    for line in lines:
        if match := _STEP.search(line):
            progress["step"], progress["total"] = int(match[1]), int(match[2])
        if line.startswith("[doctor] ") and line[9:] not in progress["diagnostics"]:
            progress["diagnostics"].append(line[9:])
    return progress


def _printed_result(console: Path) -> dict[str, Any] | None:
    lines = _lines(console)
    if not lines or lines[-1] != "}":
        return None
    raw = console.read_text(encoding="utf-8", errors="replace").splitlines()
    start = max((i for i, line in enumerate(raw) if line == "{"), default=None)
    if start is None:
        return None
    try:
        result = json.loads("\n".join(raw[start:]))  # NaN/Infinity as Python reads them
    except json.JSONDecodeError:
        return None
    return result if isinstance(result, dict) else None


# What each action writes atomically into output_dir when it ends: the result if the process died before printing it.
_SAVED = {"train": "results.json", "pipeline": "training_results.json"}


def _saved_result(row: sqlite3.Row) -> dict[str, Any] | None:
    file = Path(row["output_dir"] or "") / _SAVED.get(row["action"], "")
    if row["action"] not in _SAVED or not file.is_file() or file.stat().st_mtime < row["created"]:
        return None  # an older run's file in the same folder is not this job's result
    try:
        result = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def _ended_by_interrupt(child: subprocess.Popen | None, stderr: Path) -> bool:
    """The SIGINT ended it (the CLI's exit 130, or Python's own KeyboardInterrupt), not some other error."""
    if child is not None and child.returncode is not None:
        return child.returncode in (130, -signal.SIGINT)
    last = _tail(stderr, 1)  # a restarted server has no exit status: the CLI's last word tells
    return last == "interrupted" or last.startswith("KeyboardInterrupt")


def _tail(path: Path, n: int) -> str:
    lines = [line for line in _lines(path, 1 << 16) if not line.startswith(("Warning", "warnings.warn"))]
    return "\n".join(lines[-n:])
