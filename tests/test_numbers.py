"""Every reported number means what its name says: accuracy, pass@k, format, reward failures, prompts, errors.

Each test failed on 0.3.0 (issue: "Every number means what it says").
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest
from hello_agents.tools import RLTrainingTool

import hello_agents_rl.rollouts.loop as loop
from hello_agents_rl.evaluation.analysis import error_kind, error_summary, wrong_steps
from hello_agents_rl.evaluation.metrics import pass_at
from hello_agents_rl.evaluation.run import evaluate_model
from hello_agents_rl.rewards import build_reward, follows_format, group_advantages, to_trl_reward

ROWS = [
    {"question": "What is 48 + 24?", "ground_truth": "72", "prompt": [{"role": "user", "content": "What is 48 + 24?"}],
     "completion": [{"role": "assistant", "content": "48 + 24 = 72. Final Answer: 72"}]},
    {"question": "What is 3 + 4?", "ground_truth": "7", "prompt": [{"role": "user", "content": "What is 3 + 4?"}],
     "completion": [{"role": "assistant", "content": "3 + 4 = 7. Final Answer: 7"}]},
]


EOS = 0


class _Template:
    """A tokenizer of one token per character; token 0 ends an answer."""

    eos_token_id = pad_token_id = EOS

    def apply_chat_template(self, messages, tokenize=False, **_):
        return [ord(c) for c in messages[-1]["content"]] if tokenize else messages[-1]["content"]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if i != EOS)


MODEL = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=EOS), eval=lambda: None)


def _fake_generate(greedy: list[str], sampled: list[list[str]]):
    """The rollout loop's model call, answering greedily (temperature 0) or with the given samples (a question's
    k samples side by side, as the loop batches them); each answer ends with EOS."""
    calls = []

    def generate_turn(model, tokenizer, sequences, max_new_tokens, eos_ids, temperature=0.0):
        calls.append((temperature, len(sequences)))
        k = len(sequences) // len(greedy)
        texts = greedy if temperature == 0 else [s for row in sampled for s in row[:k]]
        return [[ord(c) for c in text] + [EOS] for text in texts]

    return generate_turn, calls


# --- 1. accuracy is greedy; pass@1..k from one set of samples ------------------------------------------------


def test_accuracy_is_greedy_even_when_sampling_for_pass_at_k(monkeypatch) -> None:
    right = "48 + 24 = 72. Final Answer: 72"
    generate, calls = _fake_generate(
        greedy=[right, "Final Answer: 7"],
        sampled=[[right, "Final Answer: 70", "Final Answer: 71", "Final Answer: 0"], ["Final Answer: 1"] * 4],
    )
    monkeypatch.setattr(loop, "generate_turn", generate)
    result = evaluate_model(MODEL, _Template(), ROWS, k=4, temperature=0.8)
    assert result["accuracy"] == 1.0, "accuracy comes from greedy answers, never from the samples"
    assert calls == [(0.0, 2), (0.8, 8)], "one batch of greedy answers, one of 2 x 4 samples"
    # question 1: 1 of 4 samples right; question 2: 0 of 4 -> unbiased pass@j = 1 - C(3, j) / C(4, j), halved
    assert result["pass_at_1"] == pytest.approx((1 / 4) / 2)
    assert result["pass_at_2"] == pytest.approx((1 - 3 / 6) / 2)
    assert result["pass_at_4"] == pytest.approx(1 / 2)
    assert result["sampling_temperature"] == 0.8


def test_temperature_with_k_1_samples_once_and_keeps_greedy_accuracy(monkeypatch) -> None:
    generate, calls = _fake_generate(greedy=["Final Answer: 72", "Final Answer: 7"],
                                     sampled=[["Final Answer: 1"], ["Final Answer: 7"]])
    monkeypatch.setattr(loop, "generate_turn", generate)
    result = evaluate_model(MODEL, _Template(), ROWS, k=1, temperature=0.7)
    assert result["accuracy"] == 1.0 and result["pass_at_1"] == 0.5 and calls == [(0.0, 2), (0.7, 2)]


def test_unreadable_answers_and_truths_never_pass(monkeypatch) -> None:
    rows = [{**ROWS[0], "ground_truth": "unknown"}]
    generate, _ = _fake_generate(greedy=["I cannot say"], sampled=[["no idea", "nothing"]])
    monkeypatch.setattr(loop, "generate_turn", generate)
    result = evaluate_model(MODEL, _Template(), rows, k=2)
    assert result["accuracy"] == 0.0 and result["pass_at_2"] == 0.0


def test_pass_at_estimator() -> None:
    assert pass_at(10, 0, 5) == 0.0 and pass_at(10, 10, 1) == 1.0 and pass_at(10, 6, 5) == 1.0
    assert pass_at(4, 1, 1) == pytest.approx(0.25) and pass_at(5, 2, 2) == pytest.approx(1 - 3 / 10)


# --- 2. format means the format asked for ----------------------------------------------------------------------


@pytest.mark.parametrize(("completion", "expected"), [
    ("48 + 24 = 72. Final Answer: 72", True),
    ("final answer: -3.5", True),
    ("The answer is 72", False),
    ("#### 72", False),
    ("\\boxed{72}", False),
    ("72", False),
    ("Final Answer: seventy-two", False),
    ("Final Answer: 7\nActually the answer is 8", True),
])
def test_follows_format_means_final_answer_marker(completion: str, expected: bool) -> None:
    assert follows_format(completion) is expected


def test_format_rate_and_the_doctors_format_metric_use_the_marker(monkeypatch) -> None:
    generate, _ = _fake_generate(greedy=["The answer is 72", "3 + 4 = 7. Final Answer: 7"], sampled=[])
    monkeypatch.setattr(loop, "generate_turn", generate)
    result = evaluate_model(MODEL, _Template(), ROWS)
    assert result["accuracy"] == 1.0 and result["format_rate"] == 0.5
    assert result["mean_tokens"] == (16 + 26) / 2 and result["truncation_rate"] == 0.0, "the EOS ends, is not counted"
    logged = {}
    adapter = to_trl_reward(build_reward("accuracy"))
    adapter(completions=["#### 72", "Final Answer: 72"], ground_truth=["72", "72"],
            log_metric=lambda name, value: logged.update({name: value}))
    assert logged["format"] == 0.5


# --- 3. a failing custom reward is left out of its group ----------------------------------------------------------


def test_failed_rewards_are_left_out_of_the_group() -> None:
    def flaky(completion: str, ground_truth: object) -> float:
        if completion == "bad":
            raise RuntimeError("reward service down")
        return float(completion)

    adapter = to_trl_reward(build_reward(flaky))
    assert adapter(completions=["1", "bad", "0", "1"], ground_truth=[0] * 4) == [1.0, None, 0.0, 1.0]
    assert group_advantages([1.0, None, 0.0, 1.0], 4) == pytest.approx([1 / 3, 0.0, -2 / 3, 1 / 3])
    scored = RLTrainingTool().run({"action": "create_reward", "reward_type": flaky, "completions": ["1", "bad", "0", "1"],
                                   "num_generations": 4})
    assert scored["scores"] == [1.0, None, 0.0, 1.0] and scored["reward_failures"] == 1
    assert scored["advantages"] == pytest.approx([1 / 3, 0.0, -2 / 3, 1 / 3])
    old_way = to_trl_reward(build_reward(flaky), failure_reward=0.0)  # still there for those who want it
    assert old_way(completions=["bad"], ground_truth=[0]) == [0.0]


@pytest.mark.slow
def test_a_failing_reward_does_not_pull_the_logged_reward_down(tiny_model: str, tmp_path: Path) -> None:
    count = []

    def every_other_fails(completion: str, ground_truth: object) -> float:
        count.append(1)
        if len(count) % 2:
            raise RuntimeError("down")
        return 1.0

    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "dataset": "arithmetic", "max_samples": 8,
        "max_steps": 2, "batch_size": 2, "num_generations": 4, "max_new_tokens": 8, "logging_steps": 1,
        "reward_type": every_other_fails, "output_dir": str(tmp_path / "out"), "report_to": "none"})
    assert result["status"] == "completed" and result["reward_failures"] == len(count) // 2
    assert result["average_reward"] == 1.0, "failures are left out, not averaged in as 0"
    assert any("left out of their groups" in d for d in result["diagnostics"])


# --- 4. a trained model remembers its prompt ------------------------------------------------------------------------


@pytest.mark.slow
def test_evaluate_and_later_stages_use_the_prompt_the_model_was_trained_with(tiny_model: str, tmp_path: Path) -> None:
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {a} + 3?", "answer": str(a + 3)}) + "\n"
                            for a in range(10, 26)))
    run = tmp_path / "sft"
    RLTrainingTool().run({"action": "train", "algorithm": "sft", "model_name": tiny_model, "dataset": str(data),
                          "system_prompt": "", "max_steps": 1, "batch_size": 4, "output_dir": str(run),
                          "report_to": "none"})
    assert json.loads((run / "model" / "prompt_settings.json").read_text()) == {"system_prompt": None,
                                                                               "enable_thinking": False}
    common = {"action": "evaluate", "dataset": str(data), "max_samples": 2, "max_new_tokens": 4}
    remembered = RLTrainingTool().run({**common, "model_path": str(run)})
    assert remembered["prompt"] == {"system_prompt": None, "enable_thinking": False, "source": "recorded with the model"}
    told = RLTrainingTool().run({**common, "model_path": str(run), "system_prompt": "Be brief."})
    assert told["prompt"]["system_prompt"] == "Be brief." and told["prompt"]["source"] == "given"
    base = RLTrainingTool().run({**common, "model_path": tiny_model})
    assert base["prompt"]["source"] == "the dataset's default" and "Final Answer" in base["prompt"]["system_prompt"]
    table = RLTrainingTool().run({**common, "action": "compare", "models": {"base": tiny_model, "sft": str(run)}})["table"]
    assert [row["prompt"]["system_prompt"] is None for row in table] == [False, True]
    grpo = RLTrainingTool().run({"action": "train", "algorithm": "grpo", "model_name": str(run), "dataset": str(data),
                                 "max_steps": 1, "batch_size": 2, "num_generations": 2, "max_new_tokens": 4,
                                 "output_dir": str(tmp_path / "grpo"), "report_to": "none"})
    assert grpo["prompt"]["system_prompt"] is None and grpo["prompt"]["source"] == "recorded with the model"
    exported = RLTrainingTool().run({"action": "export", "model_path": str(tmp_path / "grpo"),
                                     "output_dir": str(tmp_path / "exported")})
    assert (Path(exported["model_path"]) / "prompt_settings.json").is_file()


# --- 5. error analysis (the book's section 11.5) -------------------------------------------------------------------


QUESTION = "Tom has 48 apples and buys 24 more. How many apples does he have?"


@pytest.mark.parametrize(("completion", "kind"), [
    ("48 + 24 = 72. Final Answer: 72", None),
    ("He has 72 apples.", None),  # right, though not in the format asked for: not an error
    ("He has about 70 apples.", "format"),
    ("48 + 24 = 70. Final Answer: 70", "calculation"),
    ("48 x 2 = 98. Final Answer: 98", "calculation"),
    ("5 + 5 = 10. Final Answer: 10", "understanding"),
    ("48 - 24 = 24. Final Answer: 24", "reasoning"),
    ("48 * 24 = 1,152. Final Answer: 1152", "reasoning"),
])
def test_each_wrong_answer_gets_one_kind_by_the_documented_rules(completion: str, kind: str | None) -> None:
    from hello_agents_rl.rewards import extract_answer

    assert error_kind(QUESTION, completion, extract_answer(completion), Fraction(72)) == kind


def test_wrong_steps_are_checked_exactly() -> None:
    assert wrong_steps("1/3 + 1/6 = 0.5, then 0.5 * 4 = 2, and 7 - 2 = 4") == ["7 - 2 = 4"]
    assert wrong_steps("12 / 0 = 5 and 3% of 10 = 0.3") == [], "what cannot be checked is not called wrong"


def test_the_evaluation_breaks_results_down(monkeypatch) -> None:
    rows = [*ROWS, {"question": "Ann has 5 pens and 3 boxes of 4 pens. How many pens?", "ground_truth": "17",
                    "prompt": [{"role": "user", "content": "pens"}],
                    "completion": [{"role": "assistant", "content": "3 * 4 = 12. 12 + 5 = 17. Final Answer: 17"}]}]
    generate, _ = _fake_generate(greedy=["48 + 24 = 70. Final Answer: 70", "3 + 4 = 7. Final Answer: 7",
                                         "5 + 3 = 8. 8 * 4 = 32. Final Answer: 32"], sampled=[])
    monkeypatch.setattr(loop, "generate_turn", generate)
    result = evaluate_model(MODEL, _Template(), rows)
    assert result["accuracy_by_steps"] == {"1": 0.5, "2": 0.0}
    assert result["error_kinds"] == {"format": 0, "calculation": 1, "text": 0, "understanding": 0, "reasoning": 1}
    assert result["mean_abs_error_wrong"] == pytest.approx((2 + 15) / 2)
    assert result["mean_rel_error_wrong"] == pytest.approx((2 / 72 + 15 / 17) / 2)


def test_text_answers_get_honest_numbers(monkeypatch) -> None:
    pytest.importorskip("reasoning_gym")
    from hello_agents_rl.data.sources import load
    from hello_agents_rl.evaluation.metrics import comparison_markdown
    from hello_agents_rl.workflows.actions import parse

    def rows(dataset: str, size: int) -> list[dict]:
        data = load(parse({"action": "load_dataset", "dataset": f"reasoning_gym:{dataset}", "split": "test",
                           "dataset_config": {"size": size}}))
        return [dict(row) for row in data]

    words, (number,) = rows("spell_backward", 3), rows("base_conversion", 1)
    answers = [f"Reversed:\nFinal Answer: {words[0]['ground_truth']}", "Final Answer: nope", "I would say it is xyz",
               f"Final Answer: {number['ground_truth']}.0"]
    generate, _ = _fake_generate(greedy=answers, sampled=[])
    monkeypatch.setattr(loop, "generate_turn", generate)
    result = evaluate_model(MODEL, _Template(), [*words, number])
    assert result["accuracy"] == 1 / 4
    assert result["format_rate"] == 3 / 4  # "Final Answer: <answer>" counts for a text answer too
    assert number["ground_truth"] == "515" and result["mean_abs_error_wrong"] == 0.0  # the one wrong answer with a number
    # each of the 3 wrong answers has exactly one kind; 515.0 for 515 is the spelling the checker refuses
    assert result["error_kinds"] == {"format": 2, "calculation": 0, "text": 1, "understanding": 0, "reasoning": 0}
    assert [d["error_kind"] for d in result["details"]] == [None, "text", "format", "format"]

    logged: dict = {}  # training logs the same format rate beside the reward
    scores = to_trl_reward(build_reward("accuracy"))(
        completions=answers, ground_truth=[r["ground_truth"] for r in [*words, number]],
        task_ref=[r["task_ref"] for r in [*words, number]], log_metric=logged.__setitem__)
    assert scores == [1.0, 0.0, 0.0, 0.0] and logged["format"] == 3 / 4

    generate, _ = _fake_generate(greedy=["Final Answer: nope", "Final Answer: 12", "xyz"], sampled=[])
    monkeypatch.setattr(loop, "generate_turn", generate)
    text_only = evaluate_model(MODEL, _Template(), words)  # no wrong answer has a number to compare: no error
    assert text_only["mean_abs_error_wrong"] is None and text_only["mean_rel_error_wrong"] is None
    assert "| - |" in comparison_markdown([{"model": "m", **text_only}])


def test_error_summary_of_all_right_answers() -> None:
    details = [{"correct": True, "abs_error": 0.0, "rel_error": 0.0, "reasoning_steps": 1, "error_kind": None}]
    summary = error_summary(details)
    assert summary["mean_abs_error_wrong"] is None and summary["mean_rel_error_wrong"] is None  # no wrong answer
    assert summary["error_kinds"] == {"format": 0, "calculation": 0, "text": 0, "understanding": 0, "reasoning": 0}
