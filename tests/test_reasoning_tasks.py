"""reasoning-gym tasks: disjoint splits, the task's own checker in the reward and in evaluation, errors before loading."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.data.sources import load
from hello_agents_rl.workflows.actions import parse, run

pytest.importorskip("reasoning_gym")

TASK = {"dataset": "reasoning_gym:chain_sum", "dataset_config": {"max_terms": 2, "max_digits": 1, "size": 300}}


def test_train_and_test_share_no_question() -> None:
    train = load(parse({"action": "load_dataset", **TASK, "split": "train"}))
    test = load(parse({"action": "load_dataset", **TASK, "split": "test"}))
    # one-digit sums repeat across seeds: the overlap is real and must have been dropped from train
    assert 0 < len(train) < 300 and len(test) == 300
    assert not set(train["question"]) & set(test["question"])


def test_the_test_split_does_not_move_with_the_seed_and_train_does() -> None:
    def questions(split: str, seed: int) -> list[str]:
        return load(parse({"action": "load_dataset", **TASK, "split": split, "seed": seed}))["question"]

    assert questions("test", 1) == questions("test", 2)
    assert questions("train", 1) != questions("train", 2)


def test_the_reward_is_the_tasks_own_checker() -> None:
    row = load(parse({"action": "load_dataset", **TASK, "split": "test", "max_samples": 1}))[0]
    wrong = str(int(row["ground_truth"]) + 1)
    result = run({"action": "create_reward", "reward_type": "accuracy",
                  "completions": [f"Final Answer: {row['ground_truth']}", f"Final Answer: {wrong}"],
                  "ground_truth": row["ground_truth"]})
    assert result["scores"] == [1.0, 0.0]
    from hello_agents_rl.rewards import accuracy_score

    # through the row's task_ref, as TRL passes the dataset's columns to the reward
    assert accuracy_score(f"The answer is {row['ground_truth']}.", row["ground_truth"], task_ref=row["task_ref"]) == 1.0
    assert accuracy_score(f"Final Answer: {wrong}", row["ground_truth"], task_ref=row["task_ref"]) == 0.0


def test_a_text_answer_goes_to_the_checker_as_text() -> None:
    data = {"dataset": "reasoning_gym:spell_backward", "dataset_config": {"max_word_len": 5, "size": 5}}
    row = load(parse({"action": "load_dataset", **data, "split": "test", "max_samples": 1}))[0]
    from hello_agents_rl.rewards import is_correct

    assert is_correct(f"Reversed, it reads:\nFinal Answer: **{row['ground_truth']}**.", row["ground_truth"], row["task_ref"])
    assert not is_correct("Final Answer: nope", row["ground_truth"], row["task_ref"])


@pytest.mark.parametrize(("params", "message"), [
    ({"dataset": "reasoning_gym:chain_su"}, "unknown reasoning-gym task 'chain_su'; did you mean `chain_sum`?"),
    ({"dataset": "reasoning_gym:chain_sum", "dataset_config": {"max_term": 2}}, "`dataset_config.max_term`"),
    ({"dataset": "reasoning_gym:chain_sum", "dataset_config": {"min_terms": 0}}, "`dataset_config`: 'chain_sum' refuses"),
    ({"dataset": "reasoning_gym:chain_sum", "dataset_config": {"seed": 3}}, "`dataset_config.seed`: set by the split"),
    ({"dataset": "arithmetic", "dataset_config": {"size": 3}}, "only a `reasoning_gym:<task>` dataset"),
])
def test_bad_task_input_is_named_before_any_model_loads(params: dict, message: str) -> None:
    import re

    with pytest.raises(ConfigError, match=re.escape(message)):  # a hub id that is never fetched: validation only
        parse({"action": "train", "model_name": "org/no-such-model", **params})


def test_without_the_library_the_error_says_how_to_install_it() -> None:
    code = ("import sys; sys.modules['reasoning_gym'] = None\n"
            "from hello_agents_rl.workflows.actions import parse\n"
            "try:\n    parse({'action': 'load_dataset', 'dataset': 'reasoning_gym:chain_sum'})\n"
            "except ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'hello-agents-rl[tasks]'" in out
