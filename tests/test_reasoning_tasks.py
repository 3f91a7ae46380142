"""reasoning-gym tasks: disjoint splits, the task's own checker in the reward and in evaluation, errors before loading."""

from __future__ import annotations

import json
import os
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


def _checker(row: dict) -> tuple:
    from hello_agents_rl.rewards.task_library import entry, generator

    ref = json.loads(row["task_ref"])
    return generator(ref["task"], json.dumps(ref["params"], sort_keys=True), ref["seed"]), entry(row["task_ref"])


@pytest.mark.parametrize("task", [TASK, {"dataset": "reasoning_gym:base_conversion", "dataset_config": {"size": 5}}])
def test_the_reward_is_the_tasks_own_checker_on_the_answer_as_written(task: dict) -> None:
    described = run({"action": "load_dataset", **task, "split": "test", "max_samples": 1})
    row = described["sample"]  # its task_ref goes to create_reward as it is, to check the scoring before training
    truth = row["ground_truth"]
    spellings = [truth, f"{truth}.0", f"{truth}.", f"{truth} 1", f"**{truth}**"]
    scores = run({"action": "create_reward", "reward_type": "accuracy", "task_ref": row["task_ref"],
                  "completions": [f"Final Answer: {a}" for a in spellings]})["scores"]
    checker, entry = _checker(row)
    # a value-equal spelling is right exactly where the task's checker gives it full marks; bold is markdown
    assert scores == [float(checker.score_answer(a, entry) >= 1) for a in spellings[:4]] + [1.0]
    assert scores[0] == 1.0 and scores[3] == 0.0
    if task is not TASK:  # base_conversion's checker gives "515.0" for 515 partial credit: not right
        assert scores[1] == 0.0
    from hello_agents_rl.rewards import accuracy_score

    # through the row's task_ref, as TRL passes the dataset's columns to the reward
    assert accuracy_score(f"6 + 1 = 7\nFinal Answer: {truth}", truth, task_ref=row["task_ref"]) == 1.0
    assert accuracy_score(f"The answer is {truth} (base 10)", truth, task_ref=row["task_ref"]) == 0.0  # not as asked


def test_a_multi_line_answer_is_read_whole() -> None:
    data = {"dataset": "reasoning_gym:rotate_matrix", "dataset_config": {"size": 2}, "split": "test"}
    row = load(parse({"action": "load_dataset", **data}))[0]
    grid = row["ground_truth"]
    assert "\n" in grid
    from hello_agents_rl.rewards import is_correct

    assert is_correct(f"Rotated:\nFinal Answer:\n{grid}\n", grid, row["task_ref"])
    assert is_correct(f"Final Answer:\n```\n{grid}\n```", grid, row["task_ref"])
    assert not is_correct(f"Final Answer: {grid.splitlines()[0]}", grid, row["task_ref"])  # its first line only


def test_a_text_answer_goes_to_the_checker_as_text() -> None:
    data = {"dataset": "reasoning_gym:spell_backward", "dataset_config": {"max_word_len": 5, "size": 5}}
    row = load(parse({"action": "load_dataset", **data, "split": "test", "max_samples": 1}))[0]
    from hello_agents_rl.rewards import is_correct

    assert is_correct(f"Reversed, it reads:\nFinal Answer: **{row['ground_truth']}**", row["ground_truth"], row["task_ref"])
    assert not is_correct("Final Answer: nope", row["ground_truth"], row["task_ref"])


def test_a_task_ref_names_the_same_question_in_every_process() -> None:
    # polynomial_multiplication orders a set by hash: its entry i differs between two interpreters unless drawn alike
    code = ("import json\nfrom hello_agents_rl.workflows.actions import run\n"
            "print(json.dumps(run({'action': 'load_dataset', 'dataset': 'reasoning_gym:polynomial_multiplication', "
            "'split': 'test', 'dataset_config': {'size': 2}})['sample']))")
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    sample = json.loads(out.splitlines()[-1])
    scores = run({"action": "create_reward", "task_ref": sample["task_ref"],
                  "completions": [sample["completion"][0]["content"], "Final Answer: x"]})["scores"]
    assert scores == [1.0, 0.0], sample


@pytest.mark.slow
def test_every_installed_task_scores_its_own_answer_right_and_a_corrupted_one_wrong() -> None:
    import reasoning_gym.factory
    from task_scoring import CONFIGS, check_task  # benchmarks/, the script that lists the tasks scored right

    wrong = {}
    for name in sorted(reasoning_gym.factory.DATASETS):
        found = check_task(name, rows=1)
        if not found["right"]:
            wrong[name] = found
    assert wrong == {}
    assert "composite" in CONFIGS
    from hello_agents_rl.rewards.correctness import OWN_RULES

    for name in OWN_RULES:  # a departure from a task's checker stays only while that checker passes a wrong answer
        checker = reasoning_gym.factory.create_dataset(name, size=1, seed=1)
        wrong_answer = "no idea"
        assert checker.score_answer(wrong_answer, checker[0]) >= 1.0, f"{name}'s checker is fixed: drop its rule"


@pytest.mark.parametrize(("params", "message"), [
    ({"dataset": "reasoning_gym:chain_su"}, "unknown reasoning-gym task 'chain_su'; did you mean `chain_sum`?"),
    ({"dataset": "reasoning_gym:chain_sum", "dataset_config": {"max_term": 2}}, "`dataset_config.max_term`"),
    ({"dataset": "reasoning_gym:chain_sum", "dataset_config": {"min_terms": 0}}, "`dataset_config`: 'chain_sum' refuses"),
    ({"dataset": "reasoning_gym:chain_sum", "dataset_config": {"seed": 3}}, "`dataset_config.seed`: set by the split"),
    ({"dataset": "arithmetic", "dataset_config": {"size": 3}},
     "`dataset_config.size`: the arithmetic task has no such parameter (it has: carry_error)"),
    ({"dataset": "rows.jsonl", "dataset_config": {"size": 3}}, "`dataset_config`: rows of your own take no task"),
])
def test_bad_task_input_is_named_before_any_model_loads(params: dict, message: str) -> None:
    import re

    with pytest.raises(ConfigError, match=re.escape(message)):  # a hub id that is never fetched: validation only
        parse({"action": "train", "model_name": "org/no-such-model", **params})


def test_a_refused_config_leaves_the_drawing_worker_warm() -> None:
    from hello_agents_rl import bounded
    from hello_agents_rl.rewards import task_library

    task_library.draw("chain_sum", {}, 0, 0, 1)
    warm = {worker.process.pid for worker in bounded._live}
    with pytest.raises(ConfigError, match="'chain_sum' refuses"):
        task_library.draw("chain_sum", {"min_terms": 0}, 0, 0, 1)
    assert warm and {worker.process.pid for worker in bounded._live} == warm  # no interpreter start for the next draw


def test_without_the_library_the_error_says_how_to_install_it() -> None:
    code = ("import sys; sys.modules['reasoning_gym'] = None\n"
            "from hello_agents_rl.workflows.actions import parse\n"
            "try:\n    parse({'action': 'load_dataset', 'dataset': 'reasoning_gym:chain_sum'})\n"
            "except ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'hello-agents-rl[tasks]'" in out


def test_a_question_that_takes_too_long_is_a_config_error_naming_the_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from hello_agents_rl import bounded
    from hello_agents_rl.rewards import task_library

    task_library.draw("chain_sum", {}, 0, 0, 1)  # a worker with the library loaded, started outside the bound
    monkeypatch.setattr(task_library, "DRAW_SECONDS", 2.0)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"`dataset_config\.max_digits`: drawing question 0 of 'basic_arithmetic' "
                                          r"took longer than 2 s with max_digits=20"):  # upstream loops ~10^10 steps
        parse({"action": "train", "model_name": "org/no-such-model", "dataset": "reasoning_gym:basic_arithmetic",
               "dataset_config": {"max_digits": 20}})
    assert time.monotonic() - started < 15
    idle = [worker for workers in bounded._idle.values() for worker in workers]
    assert set(bounded._live) == set(idle)  # the drawing process was ended, not left spinning
    assert all(worker.process.poll() is None for worker in idle)


SCRIPT = """
from hello_agents_rl import bounded
from hello_agents_rl.workflows.actions import run
print("script body runs")
first = run({"action": "load_dataset", "dataset": "reasoning_gym:chain_sum",
             "dataset_config": {"size": 3}, "split": "test"})
workers = {worker.process.pid for worker in bounded._live}
again = run({"action": "load_dataset", "dataset": "reasoning_gym:chain_sum",
             "dataset_config": {"size": 4, "max_terms": 3}, "split": "test"})
print("rows", first["num_samples"], again["num_samples"])
print("same workers", bool(workers) and workers == {worker.process.pid for worker in bounded._live})
"""


def test_a_plain_top_level_script_runs_once(tmp_path) -> None:
    """The book's scripts have no `if __name__ == "__main__":` guard: nothing the package starts may run them again."""
    script = tmp_path / "load_task.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("script body runs") == 1
    assert "rows 3 4" in done.stdout, done.stdout
    assert "same workers True" in done.stdout, done.stdout  # the worker stays warm: a second draw starts no interpreter
    # as a notebook runs it: code with no file behind __main__
    inline = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert inline.returncode == 0 and inline.stdout.count("script body runs") == 1, inline.stderr[-2000:]


SMALL = {"dataset": "reasoning_gym:gcd",  # 9 distinct questions: 50 test questions hold them all
         "dataset_config": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 3, "size": 50}}


def test_no_training_question_left_is_said_plainly(tiny_model: str, tmp_path) -> None:
    said = r"`dataset_config`: 'gcd' gave no train questions: 50 drawn, and all 50 are in the test split.*smaller `size`"
    with pytest.raises(ConfigError, match=said):
        run({"action": "load_dataset", **SMALL})
    with pytest.raises(ConfigError, match=said):  # not a batch_size error, and before the model loads
        run({"action": "train", **SMALL, "model_name": tiny_model, "output_dir": str(tmp_path / "run"),
             "algorithm": "grpo", "batch_size": 2, "num_generations": 2, "max_steps": 1, "report_to": "none"})
    assert not (tmp_path / "run").exists()
    assert run({"action": "load_dataset", **SMALL, "split": "test"})["num_samples"] == 50


def test_a_word_list_with_no_usable_word_is_named(tmp_path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("a\nb\n")  # spell_backward draws words of 3 letters or more
    with pytest.raises(ConfigError, match=r"`dataset_config`: 'spell_backward' drew 0 questions .*check what "
                                          r"data_file=.* holds"):
        parse({"action": "load_dataset", "dataset": "reasoning_gym:spell_backward",
               "dataset_config": {"data_file": str(words)}})


def test_sft_refuses_a_task_without_reference_answers(tiny_model: str, tmp_path) -> None:
    task = {"dataset": "reasoning_gym:graph_color", "dataset_config": {"size": 4}}
    sample = run({"action": "load_dataset", **task})["sample"]
    assert sample["completion"] == [] and sample["ground_truth"] == ""  # its checker verifies any valid colouring
    with pytest.raises(ConfigError, match="`algorithm`: 4 of 4 rows .* no reference answer.*algorithm: grpo"):
        run({"action": "train", **task, "algorithm": "sft", "model_name": tiny_model,
             "output_dir": str(tmp_path / "sft"), "max_steps": 1, "report_to": "none"})


def test_grpo_keeps_the_task_ref_its_reward_reads() -> None:
    """The reward scores a reasoning-gym row with the task's own checker only if TRL hands it the row's task_ref."""
    from datasets import Dataset

    from hello_agents_rl.trainers.build import grpo_columns

    rows = Dataset.from_dict({"prompt": [[]], "ground_truth": ["olleh"], "task_ref": ["{}"], "question": ["q"]})
    assert grpo_columns(rows) == ["prompt", "ground_truth", "task_ref"]
    assert grpo_columns(rows.remove_columns("task_ref")) == ["prompt", "ground_truth"]
