"""The hand-written kernels are safe on any machine: keyed by CPU and compiler, never waited on forever, every
failure a fallback that results.json records; the switches are checked before any model loads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.trainers.fast import kernels, switches
from hello_agents_rl.trainers.fast.record import FastPathRecord
from hello_agents_rl.trainers.run_safety import InterruptGuard


@pytest.fixture
def fresh_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty kernel cache of this test's own, and no builds remembered from earlier tests (before or after)."""
    monkeypatch.setenv("HELLO_AGENTS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "has_avx512", lambda: True)  # the logic under test, on any CPU
    kernels.build.cache_clear()
    kernels._status.clear()
    yield tmp_path / "cache" / "kernels"
    kernels.build.cache_clear()
    kernels._status.clear()


def _script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_compiler_that_fails_falls_back_and_the_record_says_why(fresh_kernels: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # answers --version as a compiler does, then fails every compilation
    cxx = _script(tmp_path, "broken-c++", 'if [ "$1" = "--version" ]; then echo "broken c++ 1.0"; exit 0; fi\n'
                                          'echo "internal compiler error" >&2; exit 1\n')
    monkeypatch.setenv("CXX", cxx)
    module, why = kernels.build("streamed_gemm")
    assert module is None and why.startswith("not built")
    assert kernels.status() == {"streamed_gemm": why}
    assert FastPathRecord().as_dict()["kernels"] == {"streamed_gemm": why}

    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    kernels.build.cache_clear()
    module, why = kernels.build("decode_step")
    assert module is None and "no C++ compiler" in why
    assert set(FastPathRecord().as_dict()["kernels"]) == {"streamed_gemm", "decode_step"}


def test_a_build_is_keyed_by_the_cpus_instruction_sets_and_the_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "cpuinfo", lambda: "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 avx512f\n")
    base = kernels.machine_key("g++ 12.2.0")
    assert kernels.machine_key("g++ 12.2.0") == base
    assert kernels.machine_key("g++ 13.1.0") != base, "another compiler: another build"
    monkeypatch.setattr(kernels, "cpuinfo", lambda: "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2\n")
    assert kernels.machine_key("g++ 12.2.0") != base, "a CPU without AVX-512 never loads the AVX-512 build"


def test_a_lock_left_by_a_killed_build_is_cleared(fresh_kernels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "compiler", lambda: "g++ test")
    folder = fresh_kernels / f"decode_step-{kernels.machine_key('g++ test')}"
    folder.mkdir(parents=True)
    (folder / "lock").touch()  # what torch's loader leaves when its build is killed
    seen: list[bool] = []
    monkeypatch.setattr(kernels, "_load", lambda name, where: seen.append((where / "lock").exists()) or "module")
    assert kernels.build("decode_step") == ("module", None)
    assert seen == [False], "the loader ran with the dead build's lock gone (torch would wait on it forever)"
    assert kernels.status() == {"decode_step": "built"}


def test_a_lock_held_past_the_bound_falls_back_instead_of_waiting(fresh_kernels: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "compiler", lambda: "g++ test")
    monkeypatch.setattr(kernels, "LOCK_TIMEOUT_S", 1.0)
    folder = fresh_kernels / f"decode_step-{kernels.machine_key('g++ test')}"
    folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from filelock import FileLock
        with FileLock({str(folder / 'owner.lock')!r}):
            print('held', flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        module, why = kernels.build("decode_step")
        assert time.monotonic() - started < 10
        assert module is None and "held the build lock" in why
        assert kernels.status() == {"decode_step": why}
    finally:
        holder.kill()
        holder.wait()


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


@pytest.mark.slow
def test_a_run_whose_kernels_cannot_be_built_completes_and_says_so(tiny_model: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   fresh_kernels: Path) -> None:
    import json

    from hello_agents_rl.interfaces.tool import RLTrainingTool

    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(tmp_path / "out"),
        "dataset": "arithmetic", "max_samples": 4, "batch_size": 2, "num_generations": 2, "max_new_tokens": 8,
        "max_steps": 1, "use_lora": False,
    })
    assert result["status"] == "completed"
    recorded: dict[str, Any] = json.loads((tmp_path / "out" / "results.json").read_text())["fast_path"]["kernels"]
    assert recorded and all("no C++ compiler" in why for why in recorded.values()), recorded
