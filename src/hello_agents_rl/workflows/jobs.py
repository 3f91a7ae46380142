"""Background jobs: the actions the action table marks as jobs, as child processes, their records in SQLite.

A job is `python -m hello_agents_rl <action> --config <job folder>/config.json`, so it is exactly what a
person would run, and cancelling it is the CLI's own Ctrl-C path (SIGINT: checkpoint, results.json with
status "interrupted"). The store keeps the child's pid and process start time: a server restarted later
still knows every job, and a job whose process is gone without a result is failed, never running forever.
Progress comes from the runs' metrics.jsonl and the result from the file the action table names, never
from the console text (shown as the latest line, nothing more).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.outputs import CLAIMED_ENV, take_claim
from hello_agents_rl.workflows import actions, job_files
from hello_agents_rl.workflows.actions import JOB_ACTIONS

FINAL = ("completed", "interrupted", "failed", "cancelled")
STORE = "jobs.db"

# Cancel is a SIGINT, but a server started as `cmd &` or from a service manager may have SIGINT ignored, and
# an ignored signal stays ignored across exec: the job's process resets it, then becomes the job (same pid).
# (Popen's preexec_fn could do it without the extra interpreter, but is unsafe in a server with threads.)
_WITH_DEFAULT_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                        "os.execv(sys.argv[1], sys.argv[1:])")

_SCHEMA = """CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, action TEXT NOT NULL, params TEXT NOT NULL, output_dir TEXT, folder TEXT NOT NULL,
    pid INTEGER, started REAL, created REAL NOT NULL, state TEXT NOT NULL, finished REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT, mark TEXT)"""


class JobManager:
    """Start, watch, cancel and collect background jobs; every record lives in `<folder>/jobs.db`.

    Only starting a job creates the folder: reading a store that does not exist (a mistyped --jobs-dir)
    finds no jobs and writes nothing.
    """

    def __init__(self, folder: str | Path, create: bool = False) -> None:
        self.folder = Path(folder).expanduser().resolve()
        self._children: dict[str, subprocess.Popen] = {}  # ours to reap; a restarted server has none
        if create or (self.folder / STORE).is_file():
            self._create_store()

    def _create_store(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
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
        self._create_store()
        job_id = f"{action}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        claim = take_claim(output_dir, f"job {job_id}")  # before anything else: of concurrent starts, one gets here
        try:
            folder = self.folder / job_id
            folder.mkdir()
            config = folder / "config.json"
            config.write_text(json.dumps({**params, "action": action}, indent=2), encoding="utf-8")
            created = time.time()  # before the child exists: whatever it writes is newer than this
            with (folder / "console.log").open("wb") as out, (folder / "stderr.log").open("wb") as err:
                child = subprocess.Popen(
                    [sys.executable, "-c", _WITH_DEFAULT_SIGINT, *self._command(action, config)],
                    stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # the server's own Ctrl-C must not reach the jobs; cancel is explicit
                    # console lines reach the log as they happen; the run knows the claim it holds is its own
                    env={**os.environ, "PYTHONUNBUFFERED": "1", CLAIMED_ENV: output_dir},
                    pass_fds=(claim,),  # the child holds the claim for its whole life, this server or not
                )
        finally:
            os.close(claim)
        self._children[job_id] = child
        with self._db() as db:
            db.execute("INSERT INTO jobs (id, action, params, output_dir, folder, pid, started, created, state) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running')",
                       (job_id, action, config.read_text(), output_dir, str(folder), child.pid,
                        _create_time(child.pid), created))
        return self.status(job_id)

    def status(self, job_id: str) -> dict[str, Any]:
        """State, step/total and the latest reward/loss/KL, the doctor's findings, the latest console line, an ETA."""
        return self._refresh(self._row(job_id))

    def list(self) -> list[dict[str, Any]]:
        return [self._refresh(row) for row in self._rows()]

    def cancel(self, job_id: str) -> dict[str, Any]:
        """SIGINT, as Ctrl-C: the run saves a checkpoint after this step and ends "interrupted".

        Once only: a second SIGINT means "exit at once" to the run, so a repeated cancel changes nothing.
        """
        row = self._row(job_id)
        if not row["cancel_requested"] and self._alive(row):
            os.kill(row["pid"], signal.SIGINT)
            with self._db() as db:
                db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
        return self.status(job_id)

    def result(self, job_id: str) -> dict[str, Any]:
        """The final result dict, as the action wrote it; an error while the job still runs."""
        status = self.status(job_id)
        if status["state"] not in FINAL:
            raise ConfigError(f"`job_id`: job {job_id} is still {status['state']}{_at_step(status, ' (step {})')}; "
                              "poll its status until it ends")
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
        if not (self.folder / STORE).is_file():
            return []
        with self._db() as db:
            return db.execute("SELECT * FROM jobs ORDER BY created").fetchall()

    def _row(self, job_id: str) -> sqlite3.Row:
        row = None
        if (self.folder / STORE).is_file():
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
        progress = job_files.progress(row)
        state = row["state"]
        info: dict[str, Any] = {"job_id": row["id"], "action": row["action"], "output_dir": row["output_dir"],
                                "console": str(folder / "console.log"), "pid": row["pid"],
                                "line": _last_console_line(folder / "console.log"), **progress}
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
        """The process is gone: its result file decides; no result means it failed (or was cancelled early)."""
        child = self._children.pop(row["id"], None)
        result = job_files.saved_result(row)
        error = None
        if result is not None:
            state = {"completed": "completed", "interrupted": "interrupted", "failed": "failed"}.get(
                str(result.get("status", "completed")), "failed")
            error = result.get("error")
        elif row["cancel_requested"] and _ended_by_interrupt(child, Path(row["folder"]) / "stderr.log"):
            state, error = "cancelled", "cancelled before training started; nothing to checkpoint"
        else:  # a crash stays a crash, even one after a cancel
            state = "failed"
            error = _crash(child, progress, Path(row["folder"]) / "stderr.log")
        with self._db() as db:
            db.execute("UPDATE jobs SET state = ?, finished = ?, result = ?, error = ? WHERE id = ? AND state = ?",
                       (state, time.time(), json.dumps(result) if result is not None else None, error,
                        row["id"], row["state"]))
        return state

    def _eta(self, row: sqlite3.Row, progress: dict[str, Any]) -> float | None:
        """Seconds left at the rate seen since the first progress this store observed (model loading excluded)."""
        done = progress["fraction"]
        if not done:
            return None
        now = time.time()
        if not row["mark"]:
            with self._db() as db:
                db.execute("UPDATE jobs SET mark = ? WHERE id = ?", (f"{done}@{now}", row["id"]))
            rate = done / max(now - row["created"], 1e-6)  # first look: loading counted, a pessimistic guess
        else:
            first, _, when = row["mark"].partition("@")
            gained, spent = done - float(first), now - float(when)
            rate = gained / spent if gained > 0 and spent > 0 else done / max(now - row["created"], 1e-6)
        return round(max(1.0 - done, 0.0) / rate, 1) if rate > 0 else None


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


# -- what the job's runs wrote ----------------------------------------------------------------------------


def _at_step(progress: dict[str, Any], form: str = " at step {}") -> str:
    if not progress.get("step"):
        return " before its first step"
    return form.format(f"{progress['step']}/{progress['total']}" if progress.get("total") else progress["step"])


def _crash(child: subprocess.Popen | None, progress: dict[str, Any], stderr: Path) -> str:
    """How the process ended without a result: the signal that killed it, or its exit and last error lines."""
    code = child.returncode if child is not None else None
    if code is not None and code < 0:
        return f"killed (signal {-code}){_at_step(progress)}"
    how = f"exited with status {code}" if code is not None else "ended"
    tail = _tail(stderr, 6)
    return f"the process {how} without a result{_at_step(progress)}" + (f":\n{tail}" if tail else " (killed?)")


def _ended_by_interrupt(child: subprocess.Popen | None, stderr: Path) -> bool:
    """The SIGINT ended it (the CLI's exit 130, or Python's own KeyboardInterrupt), not some other error."""
    if child is not None and child.returncode is not None:
        return child.returncode in (130, -signal.SIGINT)
    last = _tail(stderr, 1)  # a restarted server has no exit status: the CLI's last word tells
    return last == "interrupted" or last.startswith("KeyboardInterrupt")


def _lines(path: Path, limit: int = 1 << 16) -> list[str]:
    if not path.is_file():
        return []
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - limit))
        text = handle.read().decode("utf-8", "replace")
    return [part.strip() for line in text.splitlines() for part in line.split("\r") if part.strip()]


def _last_console_line(console: Path) -> str:
    """Shown as is, read for nothing: the last line before the CLI's final JSON (its first line is a lone "{")."""
    lines = _lines(console)
    start = max((i for i, line in enumerate(lines) if line == "{"), default=None)
    if start is not None and lines[-1] == "}":
        lines = lines[:start]
    return lines[-1] if lines else ""


def _tail(path: Path, n: int) -> str:
    lines = [line for line in _lines(path) if not line.startswith(("Warning", "warnings.warn"))]
    return "\n".join(lines[-n:])
