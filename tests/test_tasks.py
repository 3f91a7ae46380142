"""The task protocol (tasks/): every built-in task implements it, nothing outside tasks/ branches on a task's name,
and a task of the user's own trains through the book's call, the CLI and MCP, from the example in docs/tasks.md."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.tasks import BUILT_IN, Task, task_for

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "hello_agents_rl"
COLUMNS = {"prompt", "completion", "ground_truth", "question"}


def _example_module() -> str:
    """docs/tasks.md's `my_tasks.py`, as a reader copies it."""
    block = re.search(r"```python\n(# my_tasks\.py\n.*?)```", (ROOT / "docs" / "tasks.md").read_text(), re.DOTALL)
    assert block, "docs/tasks.md has no my_tasks.py block"
    return block[1]


@pytest.fixture
def my_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example module on the path, with a probe subclass whose reward is a constant (which reward ran shows in the result)."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "my_tasks.py").write_text(_example_module() + "\n\nclass Probe(Reverse):\n"
                                        "    def reward(self, completion: str, ground_truth: str) -> float:\n"
                                        "        return 0.3\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "my_tasks", raising=False)
    return folder


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_built_in_task_gives_rows_tools_and_metrics_through_the_protocol(name: str, gsm8k_dir: str) -> None:
    task = task_for(name, {}, gsm8k_dir)
    assert isinstance(task, Task) and task.name == name
    for split in task.splits:
        rows = task.rows(split, 3, 0, task.system_prompt)
        assert len(rows) == 3 and COLUMNS <= set(rows.column_names), (split, rows.column_names)
        assert all(row["ground_truth"] for row in rows)
    from hello_agents_rl.rollouts.tool_registry import resolve_tools

    assert len(resolve_tools(task.tools())) == len(task.tools())  # each tool resolves to a checked function
    records = [{"question": row["question"], "ground_truth": row["ground_truth"], "calls": []}
               for row in task.rows("test", 2, 0)]
    assert all(0.0 <= value <= 1.0 for value in task.metrics(records).values())


def test_a_reasoning_gym_task_is_the_same_protocol_with_its_own_checker() -> None:
    pytest.importorskip("reasoning_gym")
    task = task_for("reasoning_gym:leg_counting", {"size": 4})
    rows = task.rows("train", 2, 0, task.system_prompt)
    assert COLUMNS | {"task_ref"} <= set(rows.column_names) and task.own_checker


def test_the_lookups_chain_metric_reads_an_agents_calls_and_a_tool_loops_transcript_alike() -> None:
    from hello_agents_rl.tasks.lookups import chain_of

    task = task_for("lookups", {"names": "ids"})
    row = task.rows("test", 1, 0)[0]
    chain = [(tool, argument) for tool, argument, _ in chain_of(row["question"]).calls]
    as_agent = {"question": row["question"], "calls": [[tool, argument, "result"] for tool, argument in chain]}
    key = {"lookup": "name", "calculator": "expression"}
    as_loop = {"question": row["question"], "calls": len(chain), "transcript": [
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": tool, "arguments": json.dumps({key[tool]: argument})}}]} for tool, argument in chain]}
    short = {"question": row["question"], "calls": [[tool, argument, "r"] for tool, argument in chain[:-1]]}
    assert task.metrics([as_agent, as_loop, short]) == {"chain_completion_rate": pytest.approx(2 / 3)}


def test_naming_a_task_brings_its_tools_and_stopping_rule_unless_the_run_gives_its_own() -> None:
    from hello_agents_rl.config import EvaluateConfig, TrainConfig

    own = TrainConfig(model_name="org/m", dataset="lookups")
    assert own.tools == task_for("lookups").tools() and own.max_tool_turns == 5
    assert EvaluateConfig(model_path="/tmp", dataset="multiplication").tools == ["calculator"]
    given = TrainConfig(model_name="org/m", dataset="lookups", tools=["calculator"], max_tool_turns=3)
    assert (given.tools, given.max_tool_turns) == (["calculator"], 3)
    assert TrainConfig(model_name="org/m", dataset="arithmetic").tools == []  # a plain-answer task: no tools


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """Every string constant in code, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_module_outside_tasks_names_a_task() -> None:
    """A task is reached through its object: no string that is a task's name, or reasoning-gym's prefix, outside
    tasks/ (help text that mentions one is prose, not a name)."""
    names = set(BUILT_IN) | {"reasoning_gym", "reasoning_gym:"}
    found = [f"{path.relative_to(PACKAGE)}:{line}: {value!r}" for path in sorted(PACKAGE.rglob("*.py"))
             if "tasks" not in path.relative_to(PACKAGE).parts
             for line, value in _string_constants(path) if value in names]
    assert found == []


def test_the_users_task_trains_through_the_books_call_with_its_own_reward(my_tasks: Path, tiny_model: str,
                                                                         tmp_path: Path) -> None:
    from hello_agents.tools import RLTrainingTool

    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(tmp_path / "grpo"),
        "dataset": "my_tasks:Probe", "dataset_config": {"test_words": 3}, "max_samples": 4, "max_steps": 2,
        "batch_size": 2, "num_generations": 2, "max_new_tokens": 8, "use_lora": False, "report_to": "none",
        "logging_steps": 1, "save_steps": 100})
    assert result["status"] == "completed" and result["num_samples"] == 4
    assert result["average_reward"] == pytest.approx(0.3)  # the task's reward: accuracy over 8 samples is k/8


def test_the_users_task_is_validated_by_its_own_schema_before_any_model_loads(my_tasks: Path) -> None:
    from hello_agents_rl.workflows.actions import parse

    call = {"action": "train", "model_name": "org/no-such-model", "dataset": "my_tasks:Reverse"}
    with pytest.raises(ConfigError, match=r"`dataset_config\.test_word`: the Reverse task has no such parameter"):
        parse({**call, "dataset_config": {"test_word": 3}})
    with pytest.raises(ConfigError, match=r"`dataset_config\.test_words`: words held out"):
        parse({**call, "dataset_config": {"test_words": 9}})
    with pytest.raises(ConfigError, match=r"`dataset`: 'my_tasks:WORDS' is list"):
        parse({**call, "dataset": "my_tasks:WORDS"})
    with pytest.raises(ConfigError, match=r"`dataset`: cannot import 'no_such_tasks'"):
        parse({**call, "dataset": "no_such_tasks:Reverse"})
    from my_tasks import Reverse

    assert parse({**call, "dataset": Reverse({"test_words": 2})}).dataset.config.test_words == 2  # the object


def test_the_users_task_trains_on_the_cli(my_tasks: Path, tiny_model: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(my_tasks), *filter(None, [os.environ.get("PYTHONPATH")])])}

    def cli(*args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "hello_agents_rl.cli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout[done.stdout.index("\n{") + 1:] if "\n{" in done.stdout else done.stdout)

    shown = cli("load-dataset", "--dataset", "my_tasks:Reverse", "--dataset_config", "{test_words: 3}", "--split", "test")
    assert shown["num_samples"] == 3 and shown["sample"]["ground_truth"] == "elppa"
    trained = cli("train", "--algorithm", "sft", "--model_name", tiny_model, "--output_dir", str(tmp_path / "sft"),
                  "--dataset", "my_tasks:Reverse", "--max_samples", "8", "--max_steps", "2", "--batch_size", "4",
                  "--use_lora", "false", "--report_to", "none", "--save_steps", "100")
    assert trained["status"] == "completed" and trained["num_samples"] == 8


def test_mcp_trains_the_users_task_only_from_a_server_that_trusts_code(my_tasks: Path, tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from hello_agents_rl.interfaces.mcp_server import RLServer

    call = {"dataset": "my_tasks:Reverse", "split": "test"}
    with pytest.raises(ConfigError, match=r"`dataset`: 'my_tasks:Reverse' imports a Task class of your own"):
        RLServer([tmp_path]).call("load_dataset", call)
    shown = RLServer([tmp_path], trust_remote_code=True).call("load_dataset", call)
    assert shown["num_samples"] == 4


@pytest.mark.slow
def test_the_demo_runs_the_users_task_in_the_tool_loop(my_tasks: Path, tmp_path: Path) -> None:
    """`demo --task my_tasks:Reverse --quick`: the four stages over the user's task, judged by its own reward."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(my_tasks), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1"}
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "hello_agents_rl.cli", "demo", "--task", "my_tasks:Reverse", "--quick",
                           "--output-dir", str(out)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "my_tasks:Reverse" and results["recipe"]["task"] == "my_tasks:Reverse"
    held_out = [json.loads(line) for line in (out / "grpo" / "eval_details.jsonl").read_text().splitlines()]
    assert [row["ground_truth"] for row in held_out] and {row["ground_truth"] for row in held_out} <= {
        "elppa", "revir", "enots", "duolc"}  # the task's four held-out words, none of its training words
    from my_tasks import Reverse  # right and wrong as the task's reward says: its full 1.0, or not

    assert all(row["correct"] == (Reverse().reward(row["completion"], row["ground_truth"]) >= 1.0) for row in held_out)
    assert results["grpo"]["accuracy"] == sum(row["correct"] for row in held_out) / len(held_out)


def test_the_columns_a_tasks_reward_or_environment_reads_reach_grpo(my_tasks: Path) -> None:
    from my_tasks import Reverse

    from hello_agents_rl.trainers.build import grpo_columns

    class Indexed(Reverse):
        row_columns = ("question",)  # a reward that reads the question

    rows = Indexed().rows("train", 4, 0)
    assert grpo_columns(rows) == ["prompt", "ground_truth"]  # rows of the user's own: the answer alone
    assert grpo_columns(rows, Indexed()) == ["prompt", "ground_truth", "question"]
