"""Crashes, interrupts, bad numbers and bad rewards lose nothing (on CPU, the tiny model, injected faults)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from hello_agents.tools import RLTrainingTool

pytestmark = pytest.mark.slow

RUN = {
    "action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 64, "max_steps": 8,
    "batch_size": 2, "num_generations": 4, "max_new_tokens": 16, "temperature": 1.0, "learning_rate": 5e-3,
    "logging_steps": 1, "save_steps": 2, "warmup_ratio": 0.0, "kl_coef": 0.05, "lora_rank": 8, "lora_alpha": 16,
    "reward_type": "length_penalty", "reward_config": {"target_length": 20, "penalty_weight": 1.0},
}


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
            if "train_runtime" not in line]


def _launch(config: dict, tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (tmp_path / f"{name}.log").open("w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", "--config", str(path)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, tmp_path / f"{name}.log"


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, "the run ended before the fault could be injected"
        assert time.time() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def test_kill_9_then_resume_matches_an_uninterrupted_run(tiny_model: str, tmp_path: Path) -> None:
    straight = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "straight")})
    out = tmp_path / "killed"
    proc, _ = _launch({**RUN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 8}, tmp_path, "killed")
    _wait_for(lambda: (out / "checkpoint-4" / "trainer_state.json").is_file(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "results.json").exists()
    resumed = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(out), "resume_from_checkpoint": True})
    assert resumed["status"] == "completed"
    assert resumed["num_steps"] == straight["num_steps"] == 8
    assert _steps(out) == _steps(tmp_path / "straight") == list(range(1, 9)), "metrics.jsonl continuous, no duplicates"
    assert (out / "model" / "model.safetensors").is_file() and (out / "adapter" / "adapter_model.safetensors").is_file()


def test_sigint_checkpoints_and_marks_results_interrupted(tiny_model: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc, log = _launch({**RUN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 200, "save_steps": 1000},
                        tmp_path, "sigint")
    _wait_for(lambda: "Step 2/200" in log.read_text(), proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    result = json.loads((out / "results.json").read_text())
    assert result["status"] == "interrupted" and 2 <= result["num_steps"] < 200
    assert (out / f"checkpoint-{result['num_steps']}").is_dir(), "a checkpoint at the step it stopped"
    assert "Traceback" not in log.read_text()


def _poison_step(monkeypatch: pytest.MonkeyPatch, at_step: int, fault: str) -> None:
    """Inject a fault into TRL's training step: a NaN loss, or a CUDA-style out-of-memory error once."""
    from trl import GRPOTrainer

    original = GRPOTrainer.training_step
    fired = []

    def faulty(self, model, inputs, *args, **kwargs):
        if self.state.global_step + 1 == at_step and not fired:
            if fault == "oom":
                fired.append(True)
                raise torch.OutOfMemoryError("CUDA out of memory (injected)")
            loss = original(self, model, inputs, *args, **kwargs)
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.fill_(float("nan"))
            return loss
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "training_step", faulty)


def test_nan_gradient_stops_cleanly_and_keeps_the_last_checkpoint(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    _poison_step(monkeypatch, at_step=3, fault="nan")
    result = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "nan")})
    assert result["status"] == "failed" and "step 3" in result["error"] and "learning_rate" in result["error"]
    assert (tmp_path / "nan" / "checkpoint-2").is_dir() and not (tmp_path / "nan" / "model").exists()
    assert json.loads((tmp_path / "nan" / "results.json").read_text())["status"] == "failed"


def test_nan_gradient_skipped_on_request(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    _poison_step(monkeypatch, at_step=3, fault="nan")
    result = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "skip"),
                                   "skip_nonfinite_steps": True})
    assert result["status"] == "completed" and result["skipped_nonfinite_steps"] == [3] and result["num_steps"] == 8
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "skip" / "adapter" / "adapter_model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_oom_backs_off_and_resumes(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    _poison_step(monkeypatch, at_step=3, fault="oom")
    result = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "oom")})
    assert result["status"] == "completed" and result["num_steps"] == 8
    assert result["oom_backoff"] == ["gradient_checkpointing: False -> True"]
    assert any("out of memory" in d for d in result["diagnostics"])


def test_oom_backoff_can_be_turned_off(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    _poison_step(monkeypatch, at_step=2, fault="oom")
    with pytest.raises(torch.OutOfMemoryError):
        RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "o"), "oom_backoff": False})


def test_a_failing_custom_reward_does_not_kill_the_run(tiny_model: str, tmp_path: Path) -> None:
    calls = []

    def flaky(completion: str, ground_truth: str) -> float | None:
        calls.append(completion)
        if len(calls) % 5 == 1:
            raise RuntimeError("reward service down")
        return None if len(calls) % 5 == 2 else float(len(completion) % 3)

    result = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "r"),
                                   "reward_type": flaky, "reward_config": {}, "max_steps": 4})
    assert result["status"] == "completed" and result["reward_failures"] == sum(i % 5 in (1, 2) for i in range(1, len(calls) + 1))
    assert any("reward service down" in d for d in result["diagnostics"])
