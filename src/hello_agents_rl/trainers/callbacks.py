"""What a person sees while training: the book's log line, metrics.jsonl, and the doctor's findings."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback, has_length

from hello_agents_rl.coupling import METRICS_READ, missing_metrics
from hello_agents_rl.trainers.doctor import Doctor

LINE_FIELDS = (("reward", "Reward", ".2f"), ("kl", "KL", ".3f"), ("loss", "Loss", ".3f"),
               ("tools/call_rate", "Tools", ".2f"),  # tool runs: share of rollouts that called a tool
               # dynamic_sampling: share of groups with equal rewards, groups the step trained on
               ("dynamic_sampling/zero_variance_fraction", "Zero-variance", ".2f"),
               ("dynamic_sampling/groups_trained", "Groups", ".1f"))


def format_line(epoch: float, num_epochs: int, step: int, max_steps: int, logs: dict[str, Any]) -> str:
    """`Epoch 1/2 | Step 100/500 | Reward: 0.45 | KL: 0.023 | Loss: 1.234` (fields that were logged)."""
    current = min(num_epochs, int(math.floor(epoch - 1e-9)) + 1) if epoch else 1
    parts = [f"Epoch {current}/{num_epochs}", f"Step {step}/{max_steps}"]
    parts += [f"{label}: {logs[key]:{spec}}" for key, label, spec in LINE_FIELDS if isinstance(logs.get(key), (int, float))]
    return " | ".join(parts)


class ConsoleProgress(ProgressCallback):
    """transformers' progress bar, printing the book's line instead of a raw dict.

    The bar is drawn only on a terminal (tqdm's `disable=None`): in a file or a pipe its carriage returns
    would splice the log lines into bar fragments, so there the lines stand alone.
    """

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.training_bar = tqdm(total=state.max_steps, dynamic_ncols=True, disable=None)
        self.current_step = 0

    def on_prediction_step(self, args: Any, state: Any, control: Any, eval_dataloader: Any = None,
                           **kwargs: Any) -> None:
        if state.is_world_process_zero and has_length(eval_dataloader):
            if self.prediction_bar is None:
                self.prediction_bar = tqdm(total=len(eval_dataloader), leave=self.training_bar is None,
                                           dynamic_ncols=True, disable=None)
            self.prediction_bar.update(1)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or "train_runtime" in logs or _is_eval(logs):
            return
        if not getattr(self, "metrics_checked", False) and hasattr(args, "beta"):  # GRPO's first training log
            self.metrics_checked = True
            missing = missing_metrics(logs, kl_logged=bool(args.beta))
            if missing:
                say(f"[warning] TRL logged no {', '.join(missing)} (renamed in this TRL?): "
                    + "; ".join(f"{name} feeds {METRICS_READ[name][0]}" for name in missing)
                    + ". Those fields stay empty; the TRL version in requirements.lock logs them.")
        epochs = math.ceil(state.num_train_epochs)
        say(format_line(state.epoch or 0.0, epochs, state.global_step, state.max_steps, logs))


def say(line: str) -> None:
    """One console line: tqdm lifts any bar out of its way; flushed, so a file gets it whole and in order."""
    tqdm.write(line)
    sys.stdout.flush()


def _is_eval(logs: dict) -> bool:
    return any(key.startswith("eval_") for key in logs)


class RunMonitor(TrainerCallback):
    """Appends each log to metrics.jsonl and runs the doctor on it; rank 0 only."""

    def __init__(self, output_dir: str, doctor: Doctor) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.doctor = doctor
        self.history: list[dict[str, Any]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The last step is always logged: else TRL folds its metrics into the end-of-training summary,
        # where the book's line, the doctor and result["average_reward"] never see them.
        if state.global_step >= state.max_steps:
            control.should_log = True

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        entry = {"step": state.global_step, **{k: _plain(v) for k, v in logs.items()}}
        if "train_runtime" not in logs and not _is_eval(logs):
            findings = self.doctor.observe(state.global_step, logs)
            if findings:
                entry["diagnostics"] = findings
                for finding in findings:
                    say(f"[doctor] {finding}")
        self.history.append(entry)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:  # one line per log: a crash loses at most one
            handle.write(json.dumps(entry) + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN; keep it visible instead of crashing the writer
    return value


class CompletionLogger(TrainerCallback):
    """Every N steps: sampled prompts, completions, rewards and advantages to completions.jsonl and TensorBoard."""

    def __init__(self, trainer: Any, output_dir: str, every: int, samples: int = 4) -> None:
        self.trainer, self.every, self.samples = trainer, every, samples
        self.path = Path(output_dir) / "completions.jsonl"

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = getattr(self.trainer, "_logs", None)
        if not state.is_world_process_zero or state.global_step % self.every or not logs or not logs["completion"]:
            return
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        rows = [
            {
                "step": state.global_step,
                "prompt": _text(prompt),
                "completion": _text(completion),
                "rewards": {name: values[i] for name, values in rewards.items()},
                "advantage": logs["advantages"][i],
            }
            for i, (prompt, completion) in enumerate(zip(logs["prompt"], logs["completion"]))
        ][: self.samples]
        with self.path.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        first = rows[0]
        say(f"[sample step {first['step']}] {first['prompt'][-80:]!r} -> {first['completion'][:120]!r} "
            f"(advantage {first['advantage']:+.2f})")
        self._to_tensorboard(state.global_step, rows)

    def _to_tensorboard(self, step: int, rows: list[dict]) -> None:
        from transformers.integrations import TensorBoardCallback

        for callback in self.trainer.callback_handler.callbacks:
            if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
                table = "\n\n".join(f"**{r['prompt'][-200:]}**\n\n{r['completion']}\n\n(advantage {r['advantage']:+.2f})" for r in rows)
                callback.tb_writer.add_text("train/completions", table, step)


def _text(value: Any) -> str:
    """Prompts and completions are strings or chat messages; keep the readable part."""
    if isinstance(value, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in value)
    return str(value)
