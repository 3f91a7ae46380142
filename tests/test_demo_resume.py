"""An interrupted demo stops with its signal's exit status and says how to resume; the rerun resumes its stage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# the demo's CLI with a smaller recipe: the same stages, seconds instead of minutes
DRIVER = """
import sys
from dataclasses import replace
from hello_agents_rl.interfaces import cli
from hello_agents_rl.workflows import demo, demo_tool_use
small = dict(sft_steps=400, sft_batch_size=8, grpo_steps=2, grpo_batch_size=2, num_generations=2, logging_steps=1)
demo.RECIPES[("tiny", True)] = replace(demo.QUICK, **small)
demo_tool_use.RECIPES[("tiny", True)] = replace(demo_tool_use.QUICK, **small, eval_questions=4)
cli.main(["demo", "--quick", "--output-dir", sys.argv[1], *sys.argv[2:]])
"""


@pytest.mark.slow
@pytest.mark.parametrize("task", [[], ["--task", "tools"]], ids=["addition", "tools"])
def test_an_interrupted_demo_exits_with_its_signal_and_the_rerun_resumes(task: list[str], tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-c", DRIVER, str(out), *task], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    seen = ""
    while "Step 5/400" not in seen:  # SFT has run some steps: the interrupt checkpoints at the next step's end
        line = first.stdout.readline()
        assert line and time.monotonic() < deadline, seen[-2000:] + first.stderr.read()[-2000:]
        seen += line
    first.send_signal(signal.SIGTERM)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert f"rerun to resume: hello-agents-rl demo --quick --output-dir {out}" in stderr
    assert "== 3/4 GRPO" not in seen + stdout, "GRPO never starts from an interrupted SFT"
    interrupted = json.loads((out / "sft" / "results.json").read_text())
    assert interrupted["status"] == "interrupted" and interrupted["signal"] == "SIGTERM"
    stopped_at = interrupted["num_steps"]
    assert 5 <= stopped_at < 400 and (out / "sft" / f"checkpoint-{stopped_at}").is_dir()

    again = subprocess.run([sys.executable, "-c", DRIVER, str(out), *task], capture_output=True, text=True, env=env,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "SFT: resuming from its last checkpoint" in again.stdout
    assert f"Step {stopped_at + 1}/400" in again.stdout and "Step 1/400" not in again.stdout, "resumed, not restarted"
    finished = json.loads((out / "results.json").read_text())
    assert json.loads((out / "sft" / "results.json").read_text())["status"] == "completed"
    assert finished["grpo"] and (out / "grpo" / "results.json").is_file()


@pytest.mark.parametrize("status", ["interrupted", "failed"])
def test_a_stage_that_does_not_complete_stops_every_demo_before_the_next(status: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool and agent demos went on to GRPO from an interrupted SFT (model_name '', then 'could not load
    Tokenizer from the folder .'); a failed stage is named as failed, and the CLI exits 1 for it."""
    from hello_agents_rl.interfaces import cli
    from hello_agents_rl.workflows import actions

    stages: list[str] = []

    def stopped(params: dict) -> dict:
        stages.append(params["algorithm"])
        return {"status": status, "signal": "SIGTERM" if status == "interrupted" else None, "model_path": ""}

    monkeypatch.setattr(actions, "run", stopped)
    with pytest.raises(SystemExit) as exited:
        cli.main(["demo", "--task", "tools", "--quick", "--output-dir", str(tmp_path / "tools")])
    assert stages == ["sft"]
    assert exited.value.code == (128 + signal.SIGTERM if status == "interrupted" else 1)


def _completed_run(folder: Path) -> dict:
    """A training run as the action table leaves it: results.json (completed) beside its model, whose weights are
    drawn anew, as a retrain draws them."""
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "model.safetensors").write_bytes(os.urandom(64))
    result = {"status": "completed", "model_path": str(folder / "model")}
    (folder / "results.json").write_text(json.dumps(result))
    return result


def test_demo_reuse_keeps_only_a_run_made_from_the_same_call_and_the_same_starting_model(tmp_path: Path) -> None:
    """`demo --reuse`: a GRPO change (its temperature, its tool-turn limit) retrains GRPO and keeps SFT; an SFT
    retrained in the same folder retrains the GRPO run made from the old one; another seed, other SFT steps or
    another demonstrator's rows train again, never taken for this recipe's."""
    from dataclasses import replace

    from hello_agents_rl.workflows.demo_tool_use import LOOKUPS, grpo_params, sft_params
    from hello_agents_rl.workflows.reuse import reuse_or_train

    trained: list[str] = []

    def train(params: dict) -> dict:
        folder = Path(params["output_dir"])
        trained.append(folder.name)
        return _completed_run(folder)

    sft, grpo, base = tmp_path / "sft", tmp_path / "grpo", tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"base weights")
    start = str(sft / "model")

    def both(recipe=LOOKUPS, seed: int = 0) -> tuple[dict, dict]:
        first = reuse_or_train(sft, sft_params(str(base), sft, recipe, seed), True, train)
        return first, reuse_or_train(grpo, grpo_params(start, grpo, recipe, seed), True, train)

    both()  # nothing there yet: both trained, what they were made from recorded
    assert trained == ["sft", "grpo"]
    assert all(run["reused"] for run in both()) and trained == ["sft", "grpo"]
    for changed in (replace(LOOKUPS, temperature=1.0), replace(LOOKUPS, max_tool_turns=3)):
        first, second = both(changed)
        assert first["reused"] and "reused" not in second, changed  # SFT reads neither key
    trained.clear()
    reuse_or_train(sft, sft_params(str(base), sft, replace(LOOKUPS, sft_steps=10), 0), True, train)
    both(replace(LOOKUPS, max_tool_turns=3))  # SFT retrained: the GRPO run from the old SFT model is stale
    assert trained == ["sft", "sft", "grpo"]
    (base / "model.safetensors").write_bytes(b"another base")  # the starting model itself changed in place
    trained.clear()
    both(replace(LOOKUPS, max_tool_turns=3))
    assert trained == ["sft", "grpo"]
    for recipe, seed in ((LOOKUPS, 1), (replace(LOOKUPS, sft_steps=10), 0),
                         (replace(LOOKUPS, task_config={"names": "words"}), 0)):  # another demonstrator's rows
        assert "reused" not in reuse_or_train(sft, sft_params(str(base), sft, recipe, seed), True, train), recipe
    params = sft_params(str(base), sft, replace(LOOKUPS, task_config={"names": "words"}), 0)
    assert "reused" not in reuse_or_train(sft, params, False, train)
    (sft / "results.json").write_text(json.dumps({"status": "failed", "model_path": start}))
    assert "reused" not in reuse_or_train(sft, params, True, train)  # a broken run: trained again
