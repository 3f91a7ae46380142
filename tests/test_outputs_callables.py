"""Python objects given in a config (tools, rewards, environments, reward components) reach every results.json
and saved config by their qualified name, in every action that accepts them; a run given them finishes,
and its folder resumes."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hello_agents.tools import RLTrainingTool

from hello_agents_rl.outputs import atomic_write_json, json_ready

HERE = __name__  # this module as the tests import it: the prefix of every qualified name below


def weather(city: str) -> str:
    """Weather in a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


def brevity(completion: str, ground_truth: Any = None, **_: Any) -> float:
    """A custom reward: shorter is better."""
    return -len(completion) / 100


class Counter:
    """A stateful environment: one count per rollout."""

    def reset(self, **row: Any) -> None:
        self.count = 0

    def add(self, n: int) -> str:
        """Add to the count.

        Args:
            n: how much
        """
        self.count += n
        return str(self.count)


def test_json_ready_names_callables_and_keeps_data() -> None:
    from datasets import Dataset

    data = {"tools": ["calculator", weather, functools.partial(weather, "Paris")], "reward_type": brevity,
            "environment": Counter, "method": Counter().add, "lambda": lambda: 0, "nested": {"x": (1, math.nan)},
            "dataset": Dataset.from_dict({"a": [1]}), "path": Path("/tmp/x"), "plain": [1, 2.5, True, None, "s"]}
    ready = json_ready(data)
    assert ready["tools"] == ["calculator", f"{HERE}.weather", f"{HERE}.weather"]
    assert ready["reward_type"] == f"{HERE}.brevity" and ready["environment"] == f"{HERE}.Counter"
    assert ready["method"] == f"{HERE}.Counter.add" and ready["lambda"].endswith("<locals>.<lambda>")
    assert ready["nested"] == {"x": [1, None]} and ready["dataset"] == "datasets.arrow_dataset.Dataset"
    assert ready["path"] == "/tmp/x" and ready["plain"] == [1, 2.5, True, None, "s"]
    assert yaml.safe_load(yaml.safe_dump(ready)) == ready == json.loads(json.dumps(ready))


def test_every_results_file_takes_the_same_objects(tmp_path: Path) -> None:
    atomic_write_json(tmp_path / "r.json", {"config": {"tools": [weather], "reward_type": brevity}})
    assert json.loads((tmp_path / "r.json").read_text())["config"]["tools"] == [f"{HERE}.weather"]


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    return str(build_tiny_tool_model(tmp_path_factory.mktemp("tiny_tools") / "model", seed=0))


GRPO = {"max_steps": 2, "batch_size": 2, "num_generations": 2, "max_new_tokens": 12, "logging_steps": 1,
        "max_tool_turns": 1, "report_to": "none", "seed": 0}
COMPONENTS = {"components": [{"type": "accuracy", "weight": 1.0}, {"type": brevity, "weight": 0.1}]}


def _results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_train_grpo_records_its_callables_and_its_folder_resumes(tool_model: str, tmp_path: Path) -> None:
    out = tmp_path / "grpo"
    params = {"action": "train", "algorithm": "grpo", "model_name": tool_model, "dataset": "multiplication",
              "max_samples": 8, "tools": [weather], "environment": Counter, "reward_type": "combined",
              "reward_config": COMPONENTS, "save_steps": 1, "output_dir": str(out), **GRPO}
    result = RLTrainingTool().run(params)
    assert result["status"] == "completed"
    config = _results(out / "results.json")["config"]
    assert config["tools"] == [f"{HERE}.weather"] and config["environment"] == f"{HERE}.Counter"
    assert config["reward_config"]["components"][1]["type"] == f"{HERE}.brevity"
    assert json.loads(json.dumps(result)) == _results(out / "results.json"), "the returned result is plain JSON too"
    (out / "results.json").unlink()  # the state a crash at the end left behind: checkpoints, no results
    resumed = RLTrainingTool().run({**params, "resume_from_checkpoint": str(out / "checkpoint-1")})
    assert resumed["status"] == "completed" and resumed["num_steps"] == 2
    assert _results(out / "results.json")["config"]["tools"] == [f"{HERE}.weather"]


@pytest.mark.slow
def test_train_sft_records_a_callable_tool(tool_model: str, tmp_path: Path) -> None:
    out = tmp_path / "sft"  # (SFT reads no reward: a reward_type given to it is refused, tests/test_config.py)
    RLTrainingTool().run({"action": "train", "algorithm": "sft", "model_name": tool_model, "dataset": "multiplication",
                          "max_samples": 8, "tools": ["calculator", weather], "max_steps": 1,
                          "batch_size": 4, "report_to": "none", "output_dir": str(out)})
    config = _results(out / "results.json")["config"]
    assert config["tools"] == ["calculator", f"{HERE}.weather"]


@pytest.mark.slow
def test_pipeline_records_a_callable_tool_and_reward(tool_model: str, tmp_path: Path) -> None:
    root = tmp_path / "pipeline"
    result = RLTrainingTool().run({
        "action": "pipeline", "model_name": tool_model, "output_dir": str(root), "dataset": "multiplication",
        "tools": ["calculator", weather], "reward_type": brevity, "max_tool_turns": 1, "max_samples": 8,
        "report_to": "none", "sft": {"max_steps": 1, "batch_size": 4},  # the calculator: the transcripts call it
        "grpo": {key: value for key, value in GRPO.items() if key not in ("max_tool_turns", "report_to")},
        "evaluation": {"max_samples": 2, "max_new_tokens": 12},
    })
    saved = _results(root / "training_results.json")
    for stage in ("sft", "grpo"):
        assert saved[stage]["config"]["tools"] == ["calculator", f"{HERE}.weather"]
        assert _results(root / stage / "results.json")["config"]["tools"] == ["calculator", f"{HERE}.weather"]
    assert saved["grpo"]["config"]["reward_type"] == f"{HERE}.brevity"  # the shared reward goes where it is read
    assert saved["sft"]["config"]["reward_type"] == "accuracy"
    assert result["status"] == "completed"


@pytest.mark.slow
def test_search_records_a_callable_tool_and_reward_in_results_and_configs(tool_model: str, tmp_path: Path) -> None:
    out = tmp_path / "search"
    base = {"model_name": tool_model, "algorithm": "grpo", "dataset": "multiplication", "max_samples": 8,
            "tools": [weather], "reward_type": brevity, "save_steps": 1000, **GRPO}
    result = RLTrainingTool().run({"action": "search", "output_dir": str(out), "sampler": "random", "n_trials": 1,
                                   "seed": 0, "objective": "reward", "base": base, "space": {"kl_coef": [0.05]}})
    assert result["status"] == "completed" and result["trials"][0]["state"] == "complete"
    trial = out / "trial-0000"
    assert _results(trial / "results.json")["config"]["tools"] == [f"{HERE}.weather"]
    for saved in (trial / "config.yaml", out / "best_config.yaml"):
        config = yaml.safe_load(saved.read_text(encoding="utf-8"))
        assert config["tools"] == [f"{HERE}.weather"] and config["reward_type"] == f"{HERE}.brevity"
    assert _results(out / "results.json")["n_trials"] == 1
