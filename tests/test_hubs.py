"""Environments from the hubs train through the task protocol, offline: docs/tasks.md's verifiers and OpenEnv
scripts run as a user runs them (a plain script, `from hello_agents.tools import RLTrainingTool`), each with GRPO on
the tiny tool model, in an environment with verifiers 0.4.0 and openenv-core 0.3.0; then each adapter is checked
on what the environment itself says: its reward on right and wrong rollouts, its tools, its held-out rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import Venv

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _script(name: str, model: str) -> str:
    text = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    block = re.search(rf"```python\n# {re.escape(name)}\n(.*?)```", text, re.DOTALL)
    assert block, f"docs/tasks.md has no {name} block"
    assert 'MODEL = "./models/sft_full"' in block[1]
    return block[1].replace('MODEL = "./models/sft_full"', f"MODEL = {model!r}")


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    return str(build_tiny_tool_model(tmp_path_factory.mktemp("tool_model") / "tiny", seed=0))


def _run(venv: Venv, folder: Path, name: str, code: str) -> str:
    (folder / name).write_text(code, encoding="utf-8")
    return venv.run(folder / name, timeout=900, env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                                                    "TRL_EXPERIMENTAL_SILENCE": "1"})


def _steps(run: Path) -> list[dict]:
    """The training steps metrics.jsonl logged (its last line is the run's summary)."""
    return [e for e in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in e]


def test_a_verifiers_taskset_trains_with_its_own_tools_and_rubric(hub_environments: Venv, tool_model: str,
                                                                   tmp_path: Path) -> None:
    hub_environments.cwd = tmp_path  # the script's ./models/... land here
    script = _script("vf_train.py", tool_model)
    out = _run(hub_environments, tmp_path, "vf_train.py", script)
    assert out.strip().splitlines()[-1].startswith("completed 16 "), out[-2000:]  # 20 tasks, every 5th held out
    logged = _steps(tmp_path / "models" / "grpo_verifiers")
    assert len(logged) == 2 and all("rewards/reward/mean" in step for step in logged)  # the task's reward ran
    check = script.split("task = from_verifiers")[0] + '''
task = from_verifiers(Additions(AdditionsConfig()))
train, test = task.rows("train"), task.rows("test")
row = train[0]
right = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
    "name": "add", "arguments": {"a": 1, "b": 2}}}]}, {"role": "tool", "name": "add", "content": "3"},
    {"role": "assistant", "content": row["ground_truth"]}]
from hello_agents_rl.trainers.build import grpo_columns

assert grpo_columns(train, task) == ["prompt", "ground_truth", "task_index"]  # the reward knows each row's task
print(len(train), len(test), set(train["task_index"]) & set(test["task_index"]),
      task.reward(row["ground_truth"], row["ground_truth"], task_index=row["task_index"], trajectory=right),
      task.reward("7", row["ground_truth"], task_index=row["task_index"]),
      [tool.__name__ for tool in task.tools()], task.tools()[0](20, 22))
'''
    assert _run(hub_environments, tmp_path, "vf_check.py", check).strip().splitlines()[-1] == \
        "16 4 set() 1.0 0.0 ['add'] 42"


def test_a_verifiers_reward_that_needs_its_runtime_is_refused_before_any_model_loads(
        hub_environments: Venv, tool_model: str, tmp_path: Path) -> None:
    script = _script("vf_train.py", tool_model).split("task = from_verifiers")[0] + '''
class Judged(Addition):
    @vf.reward(weight=1.0)
    async def judged(self, trace: vf.Trace, runtime) -> float:
        return 1.0


class JudgedTasks(vf.Taskset[Judged, AdditionsConfig]):
    def load(self):
        return [Judged(Sum(id=f"j{i}", prompt="What is 1 + 2?", answer=3), self.config.task) for i in range(5)]


try:
    from_verifiers(JudgedTasks(AdditionsConfig()))
except ValueError as error:
    print(error)
'''
    said = _run(hub_environments, tmp_path, "vf_judged.py", script).strip().splitlines()[-1]
    assert said.startswith("`dataset`: the verifiers rewards judged need verifiers' runtime"), said


def test_an_openenv_environment_trains_with_its_actions_as_tools_and_its_rubric_as_reward(
        hub_environments: Venv, tool_model: str, tmp_path: Path) -> None:
    hub_environments.cwd = tmp_path
    script = _script("oe_train.py", tool_model)
    out = _run(hub_environments, tmp_path, "oe_train.py", script)
    assert out.strip().splitlines()[-1].startswith("completed 32 "), out[-2000:]  # 40 episodes, every 5th held out
    logged = _steps(tmp_path / "models" / "grpo_openenv")
    assert len(logged) == 2 and all("rewards/GuessNumber/mean" in step for step in logged)  # the rubric's reward
    check = script.split("task = from_openenv")[0] + '''
from transformers.utils import get_json_schema

task = from_openenv(GuessNumber, [GuessAction], "Find the secret number with the guess tool.",
                    resets=[{"seed": seed} for seed in range(40)])
episode = task.environment()()
episode.reset(prompt="ignored", seed=7)
low, high, said = 1, 20, ""
while not said.startswith("Right"):  # a binary search, told by the environment's own observations
    guess = (low + high) // 2
    said = episode.guess(guess=guess)
    low, high = (guess + 1, high) if "too low" in said else (low, guess - 1) if "too high" in said else (low, high)
from hello_agents_rl.trainers.build import grpo_columns

assert grpo_columns(task.rows("train"), task) == ["prompt", "ground_truth", "seed"]  # reset(**row) gets its seed
schema = get_json_schema(episode.guess)["function"]
print(episode.get_reward(), episode.guess(guess=1), schema["name"],
      schema["parameters"]["properties"]["guess"]["description"], len(task.rows("test")))
'''
    assert _run(hub_environments, tmp_path, "oe_check.py", check).strip().splitlines()[-1] == \
        "1.0 The episode is over: no more actions. guess The number you guess. 8"
