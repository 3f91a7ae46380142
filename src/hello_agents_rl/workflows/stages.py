"""A demo's training stages, stopped and resumed as one: every demo (addition, tools, agents) runs its SFT and GRPO
through `run_stage`, so an interrupted stage stops the demo, says how to resume, and the rerun resumes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hello_agents_rl.outputs import RESULTS, atomic_write_json, checkpoints, completed_run
from hello_agents_rl.workflows import actions

PROGRESS = "demo_progress.json"  # what an unfinished demo was started with: a rerun with the same resumes it


class DemoInterrupted(Exception):
    """A stage of the demo did not complete: stopped on a signal (its checkpoint saved, the rerun resumes it), or
    failed (its results.json says why)."""

    def __init__(self, stage: str, signal_name: str | None, status: str = "interrupted") -> None:
        self.stage, self.signal_name, self.status = stage, signal_name, status
        if status == "interrupted":
            message = (f"the demo's {stage} stage was interrupted ({signal_name or 'a signal'}); its checkpoint is "
                       "saved: run the same command again to resume it")
        else:
            message = (f"the demo's {stage} stage ended {status}; its results.json says why, and the same command "
                       "resumes from its last checkpoint once that is mended")
        super().__init__(message)


def start_or_resume(out: Path, started_with: dict[str, Any]) -> bool:
    """Whether `out` holds an unfinished demo started with the same settings (it resumes); else the demo starts
    over, and this one is recorded as unfinished until it writes its results."""
    progress = out / PROGRESS
    resume = not (out / RESULTS).is_file() and progress.is_file() and json.loads(progress.read_text()) == started_with
    if not resume:
        (out / RESULTS).unlink(missing_ok=True)  # the demo owns its folder: a finished demo starts over
        atomic_write_json(progress, started_with)
    return resume


def run_stage(params: dict[str, Any], stage: str, resume: bool) -> dict[str, Any]:
    """One training stage through the action table: on a resumed demo a finished stage is kept and an interrupted
    one continues from its checkpoint; a stage that does not complete stops the demo (DemoInterrupted)."""
    out = Path(params["output_dir"])
    finished = completed_run(out) if resume else None
    if finished:
        print(f"   {stage}: kept from the interrupted demo's finished run in {out}", flush=True)
        return finished
    if resume and checkpoints(out):
        print(f"   {stage}: resuming from its last checkpoint in {out}", flush=True)
        params = {**params, "resume_from_checkpoint": True, "overwrite_output_dir": False}
    result = actions.run(params)
    if result.get("status") != "completed":
        raise DemoInterrupted(stage, result.get("signal"), result.get("status") or "failed")
    return result
