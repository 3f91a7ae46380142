"""What a person sees while training: the seed's log line, metrics.jsonl, and the doctor's findings."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback

from hello_agents.rl.trainers.doctor import Doctor

LINE_FIELDS = (("reward", "Reward", ".2f"), ("kl", "KL", ".3f"), ("loss", "Loss", ".3f"))


def format_line(epoch: float, num_epochs: int, step: int, max_steps: int, logs: dict[str, Any]) -> str:
    """`Epoch 1/2 | Step 100/500 | Reward: 0.45 | KL: 0.023 | Loss: 1.234` (fields that were logged)."""
    current = min(num_epochs, int(math.floor(epoch - 1e-9)) + 1) if epoch else 1
    parts = [f"Epoch {current}/{num_epochs}", f"Step {step}/{max_steps}"]
    parts += [f"{label}: {logs[key]:{spec}}" for key, label, spec in LINE_FIELDS if isinstance(logs.get(key), (int, float))]
    return " | ".join(parts)


class ConsoleProgress(ProgressCallback):
    """transformers' progress bar, printing the seed's line instead of a raw dict."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or "train_runtime" in logs or _is_eval(logs):
            return
        line = format_line(state.epoch or 0.0, math.ceil(state.num_train_epochs), state.global_step, state.max_steps, logs)
        if self.training_bar is not None:
            self.training_bar.write(line)
        else:
            print(line, flush=True)


def _is_eval(logs: dict) -> bool:
    return any(key.startswith("eval_") for key in logs)


class RunMonitor(TrainerCallback):
    """Appends each log to metrics.jsonl and runs the doctor on it; rank 0 only."""

    def __init__(self, output_dir: str, doctor: Doctor) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.doctor = doctor
        self.history: list[dict[str, Any]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        entry = {"step": state.global_step, **{k: _plain(v) for k, v in logs.items()}}
        if "train_runtime" not in logs and not _is_eval(logs):
            findings = self.doctor.observe(state.global_step, logs)
            if findings:
                entry["diagnostics"] = findings
                for finding in findings:
                    print(f"[doctor] {finding}", flush=True)
        self.history.append(entry)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:  # one line per log: a crash loses at most one
            handle.write(json.dumps(entry) + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN; keep it visible instead of crashing the writer
    return value
