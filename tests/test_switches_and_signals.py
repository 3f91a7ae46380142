"""The fast path's switches are checked before any model loads; a signal mid-run checkpoints, a hung step stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.trainers.fast import switches
from hello_agents_rl.trainers.run_safety import InterruptGuard


@pytest.mark.parametrize("value", ["bogus", "packed_weights,bogus"])
def test_a_bad_off_list_is_a_config_error_before_any_model_loads(value: str, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path, tiny_model: str) -> None:
    from hello_agents_rl.interfaces.tool import RLTrainingTool
    from hello_agents_rl.trainers import run

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(run, "load_model", no_loading)
    monkeypatch.setattr(run, "load_tokenizer", no_loading)
    monkeypatch.setenv(switches.OFF_SWITCH, value)
    params = {"action": "train", "algorithm": "grpo", "model_name": tiny_model,
              "output_dir": str(tmp_path / "out"), "dataset": "arithmetic", "max_samples": 4}
    with pytest.raises(ConfigError, match=r"`HELLO_AGENTS_FAST_OFF` \(environment\): .*bogus.*or `all`"):
        RLTrainingTool().run(params)
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv(switches.ENV_SWITCH, "0")
    assert switches.problem() is None, "with the fast path off, the list is not read"
    assert not switches.on("packed_weights")


def test_the_cli_exits_2_on_a_bad_off_list(tmp_path: Path, tiny_model: str) -> None:
    env = {**os.environ, switches.OFF_SWITCH: "Packed_Weights,nope"}
    run = subprocess.run([sys.executable, "-m", "hello_agents_rl.cli", "train", "--model_name", tiny_model,
                          "--output_dir", str(tmp_path / "out"), "--dataset", "arithmetic"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "HELLO_AGENTS_FAST_OFF" in run.stderr + run.stdout and "nope" in run.stderr + run.stdout


def test_off_list_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(switches.OFF_SWITCH, "all")
    assert not any(switches.on(name) for name in switches.OPTIMISATIONS)
    monkeypatch.setenv(switches.OFF_SWITCH, " Packed_Weights ")
    assert not switches.on("packed_weights") and switches.on("inverse_cdf")


def _guard_in_training(guard: InterruptGuard, steps: int) -> SimpleNamespace:
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    for _ in range(steps):
        guard.on_step_begin(None, None, control)
        guard.on_step_end(None, None, control)
    return control


def test_a_signal_before_any_step_ended_stops_at_once() -> None:
    guard = InterruptGuard()
    with pytest.raises(KeyboardInterrupt):
        guard.request(signal.SIGTERM, None)  # e.g. while the first step waits on something that never comes


def test_a_signal_after_a_step_checkpoints_then_a_hung_step_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = InterruptGuard()
    control = _guard_in_training(guard, 1)
    monkeypatch.setattr(InterruptGuard, "MIN_GRACE_S", 0.5)
    with guard.installed():
        guard.request(signal.SIGTERM, None)  # the step goes on: a checkpoint at its end
        assert guard.requested == "SIGTERM" and not control.should_save
        with pytest.raises(KeyboardInterrupt):
            time.sleep(5)  # a hung step: the watchdog interrupts it after the grace period
    guard2 = InterruptGuard()
    control2 = _guard_in_training(guard2, 1)
    with guard2.installed():
        guard2.request(signal.SIGTERM, None)
        _guard_in_training(guard2, 1)  # the step ends in time
        assert control2 is not None
        time.sleep(1.0)  # no watchdog fires once the step has ended
    assert guard2._watchdog is None
