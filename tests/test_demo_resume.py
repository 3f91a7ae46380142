"""An interrupted demo stops with its signal's exit status and says how to resume; the rerun resumes its stage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

# the demo's CLI with a smaller recipe: the same stages, seconds instead of minutes
DRIVER = """
import sys
from dataclasses import replace
from hello_agents_rl.interfaces import cli
from hello_agents_rl.workflows import demo
demo.RECIPES[("tiny", True)] = replace(demo.QUICK, sft_steps=400, sft_batch_size=8, grpo_steps=2, grpo_batch_size=2,
                                       num_generations=2, logging_steps=1)
cli.main(["demo", "--quick", "--output-dir", sys.argv[1]])
"""


@pytest.mark.slow
def test_an_interrupted_demo_exits_with_its_signal_and_the_rerun_resumes(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-c", DRIVER, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    deadline = time.monotonic() + 300
    seen = ""
    while "Step 5/400" not in seen:  # SFT has run some steps: the interrupt checkpoints at the next step's end
        line = first.stdout.readline()
        assert line and time.monotonic() < deadline, seen[-2000:] + first.stderr.read()[-2000:]
        seen += line
    first.send_signal(signal.SIGTERM)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "rerun to resume: hello-agents-rl demo --quick --output-dir" in stderr
    assert "== 3/4 GRPO" not in seen + stdout, "GRPO never starts from an interrupted SFT"
    interrupted = json.loads((out / "sft" / "results.json").read_text())
    assert interrupted["status"] == "interrupted" and interrupted["signal"] == "SIGTERM"
    stopped_at = interrupted["num_steps"]
    assert 5 <= stopped_at < 400 and (out / "sft" / f"checkpoint-{stopped_at}").is_dir()

    again = subprocess.run([sys.executable, "-c", DRIVER, str(out)], capture_output=True, text=True, env=env,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "SFT: resuming from its last checkpoint" in again.stdout
    assert f"Step {stopped_at + 1}/400" in again.stdout and "Step 1/400" not in again.stdout, "resumed, not restarted"
    finished = json.loads((out / "results.json").read_text())
    assert json.loads((out / "sft" / "results.json").read_text())["status"] == "completed"
    assert finished["grpo"] and (out / "grpo" / "results.json").is_file()


def _completed_run(folder: Path, config: dict) -> dict:
    """A training run as the action table leaves it: results.json (completed, its config) beside its model."""
    (folder / "model").mkdir(parents=True, exist_ok=True)
    result = {"status": "completed", "model_path": str(folder / "model"), "config": config}
    (folder / "results.json").write_text(json.dumps(result))
    return result


def test_demo_reuse_keeps_only_runs_trained_with_the_recipes_settings_data_and_seed(tmp_path: Path) -> None:
    """`demo --reuse`: a GRPO change (here its temperature) retrains GRPO and keeps SFT; a run trained with another
    seed, other SFT steps or another demonstrator is trained again, never taken for this recipe's."""
    from dataclasses import replace

    from hello_agents_rl.workflows.demo_tool_use import LOOKUPS, grpo_settings, reuse_or_train, sft_settings

    trained: list[str] = []

    def train(folder: Path, config: dict) -> Callable[[], dict]:
        def run() -> dict:
            trained.append(folder.name)
            return _completed_run(folder, config)
        return run

    sft, grpo = tmp_path / "sft", tmp_path / "grpo"
    start = str(sft / "model")
    sft_run = train(sft, sft_settings(LOOKUPS) | {"seed": 0})
    grpo_run = train(grpo, grpo_settings(LOOKUPS) | {"seed": 0, "model_name": start})
    reuse_or_train(sft, LOOKUPS, 0, reuse=True, train=sft_run)  # nothing there yet: trained, its data recorded
    reuse_or_train(grpo, LOOKUPS, 0, reuse=True, train=grpo_run, start=start)
    assert trained == ["sft", "grpo"]
    assert reuse_or_train(sft, LOOKUPS, 0, reuse=True, train=sft_run)["reused"] is True
    assert reuse_or_train(grpo, LOOKUPS, 0, reuse=True, train=grpo_run, start=start)["reused"] is True
    assert trained == ["sft", "grpo"]
    hotter = replace(LOOKUPS, temperature=1.0)
    assert reuse_or_train(sft, hotter, 0, reuse=True, train=sft_run)["reused"] is True  # SFT knows no temperature
    assert "reused" not in reuse_or_train(grpo, hotter, 0, reuse=True, train=grpo_run, start=start)
    assert trained[-1] == "grpo"
    for recipe, seed in ((LOOKUPS, 1), (replace(LOOKUPS, sft_steps=10), 0),
                         (replace(LOOKUPS, task_config={"names": "words"}), 0)):  # another demonstrator's rows
        assert "reused" not in reuse_or_train(sft, recipe, seed, reuse=True, train=sft_run), (recipe, seed)
    assert "reused" not in reuse_or_train(sft, LOOKUPS, 0, reuse=False, train=sft_run)
    (sft / "results.json").write_text(json.dumps({"status": "failed", "model_path": start,
                                                  "config": sft_settings(LOOKUPS) | {"seed": 0}}))
    assert "reused" not in reuse_or_train(sft, LOOKUPS, 0, reuse=True, train=sft_run)  # a broken run: trained again
