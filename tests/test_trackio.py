"""report_to: trackio -- a local dashboard beside TensorBoard and wandb, no account: the run's metrics are read back
through trackio's own API, the same values metrics.jsonl holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hello_agents_rl.trainers.args import TRACKIO_PROJECT

pytestmark = pytest.mark.slow

# trackio fixes its folder (TRACKIO_DIR) when imported: the run and the read-back run in a process of their own
SCRIPT = """
import json, sys
from hello_agents.tools import RLTrainingTool
result = RLTrainingTool().run(json.loads(sys.argv[1]))
from trackio import Api
from trackio.sqlite_storage import SQLiteStorage
runs = list(Api().runs(sys.argv[2]))
print(json.dumps({"status": result["status"], "runs": [r.name for r in runs],
                  "logs": SQLiteStorage.get_logs(sys.argv[2], runs[0].name, scalar_only=True)}, default=str))
"""


def test_trackio_holds_the_runs_metrics(tiny_model: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    params = {"action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(out),
              "dataset": "arithmetic", "max_samples": 4, "max_steps": 2, "batch_size": 2, "num_generations": 2,
              "max_new_tokens": 8, "logging_steps": 1, "save_steps": 100, "report_to": ["trackio"],
              "reward_type": "length_penalty", "reward_config": {"target_length": 5, "penalty_weight": 1.0}}
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(params), TRACKIO_PROJECT], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["status"] == "completed" and read["runs"] == [str(out.resolve())], "one run, named by its folder"
    tracked = {e["step"]: e for e in read["logs"] if "train/reward" in e}
    logged = {e["step"]: e for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in e}
    assert sorted(tracked) == sorted(logged) == [1, 2]
    for step, entry in logged.items():
        for key in ("reward", "kl", "loss"):
            assert tracked[step][f"train/{key}"] == pytest.approx(entry[key]), (step, key)
    assert list((tmp_path / "trackio").glob("*.db")), "stored locally, where TRACKIO_DIR points"


def test_trackio_missing_is_a_config_error_with_the_install_line(monkeypatch, tmp_path: Path) -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl import ConfigError
    from hello_agents_rl.config import train

    monkeypatch.setattr(train, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="`report_to`.*pip install 'hello-agents-rl\\[trackio\\]'"):
        RLTrainingTool().run({"action": "train", "output_dir": str(tmp_path / "out"), "report_to": ["trackio"]})
    assert not (tmp_path / "out").exists()
