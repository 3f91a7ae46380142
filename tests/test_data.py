"""The data layer: GSM8K offline, the embedded task, custom files and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import Dataset
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.data.sources import load
from hello_agents_rl.tasks import arithmetic
from hello_agents_rl.workflows.actions import parse


def _cfg(**params):
    return parse({"action": "load_dataset", **params})


def test_gsm8k_from_local_folder(gsm8k_dir: str) -> None:
    rows = load(_cfg(dataset="gsm8k", dataset_path=gsm8k_dir, split="test"))
    assert len(rows) == 1319
    first = rows.filter(lambda r: r["question"].startswith("Janet"))[0]
    assert first["ground_truth"] == "18"
    assert first["completion"][0]["content"].endswith("Final Answer: 18")
    assert "<<" not in first["completion"][0]["content"], "calculator annotations are stripped"
    assert first["prompt"][0]["role"] == "system"


def test_gsm8k_env_var(gsm8k_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELLO_AGENTS_GSM8K", gsm8k_dir)
    assert len(load(_cfg(dataset="gsm8k", max_samples=5))) == 5


def test_max_samples_is_a_seeded_shuffle(gsm8k_dir: str) -> None:
    a = load(_cfg(dataset_path=gsm8k_dir, max_samples=20, seed=1))["question"]
    b = load(_cfg(dataset_path=gsm8k_dir, max_samples=20, seed=1))["question"]
    c = load(_cfg(dataset_path=gsm8k_dir, max_samples=20, seed=2))["question"]
    first20 = load(_cfg(dataset_path=gsm8k_dir))["question"][:20]
    assert a == b and a != c and a != first20


def test_arithmetic_is_seeded_and_held_out() -> None:
    train = arithmetic.make_dataset("train", 500, seed=3)
    assert train["question"] == arithmetic.make_dataset("train", 500, seed=3)["question"]
    test = set(arithmetic.make_dataset("test")["question"])
    assert len(test) == arithmetic.TEST_QUESTIONS and not test & set(train["question"])
    row = arithmetic.make_dataset("train", 1, seed=0)[0]
    a, b = [int(x) for x in row["question"].removeprefix("What is ").rstrip("?").split(" + ")]
    assert row["completion"][0]["content"] == f"{a} + {b} = {a + b}. Final Answer: {a + b}"


def test_demonstrator_errs_only_on_carries() -> None:
    rows = arithmetic.make_dataset("train", 2000, seed=0, carry_error=0.7)
    wrong = [r for r in rows if not r["completion"][0]["content"].endswith(f"Final Answer: {r['ground_truth']}")]
    assert all(r["carry"] for r in wrong)
    carries = sum(r["carry"] for r in rows)
    assert 0.6 < len(wrong) / carries < 0.8


def test_custom_jsonl_csv_and_dataset(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "What is 2 + 2?", "a": "4"}\n\n{"q": "Half of 3?", "a": "1.5"}\n')
    (tmp_path / "d.csv").write_text('q,a\n"What is 2 + 2?",4\n')
    rows = load(_cfg(dataset=str(tmp_path / "d.jsonl"), question_column="q", answer_column="a"))
    assert rows["ground_truth"] == ["4", "1.5"] and rows["completion"][0][0]["content"] == "Final Answer: 4"
    assert len(load(_cfg(dataset=str(tmp_path / "d.csv"), question_column="q", answer_column="a"))) == 1
    ds = Dataset.from_dict({"question": ["What is 1 + 1?"], "answer": ["#### 2"]})
    assert load(_cfg(dataset=ds))["ground_truth"] == ["2"]


@pytest.mark.parametrize("answer", ["74 + 5 = 79. Final Answer: 79", "74 + 5 = 79\n#### 79", "74 + 5 = \\boxed{79}",
                                    "The answer is 79.", "79"])
def test_a_custom_answer_in_any_form_the_reward_reads_is_accepted(tmp_path: Path, answer: str) -> None:
    """The ground truth is read by the reward's own final-answer parser: what the reward reads, a file may say."""
    import json

    from hello_agents_rl.rewards import extract_answer

    (tmp_path / "d.jsonl").write_text(json.dumps({"question": "What is 74 + 5?", "answer": answer}) + "\n")
    rows = load(_cfg(dataset=str(tmp_path / "d.jsonl")))
    assert rows["ground_truth"] == ["79"] and extract_answer(answer) == 79


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"question": "x", "answer": "1"}\n{"question": "y", "answer": \n', r"d\.jsonl:2: invalid JSON"),
        ('{"question": "x"}\n', r"d\.jsonl:1: no column 'answer'.*set question_column/answer_column"),
        ('{"question": "x", "answer": "1"}\n{"question": "y"}\n',  # one row lacks it: that row is the fix
         r"d\.jsonl:2: no column 'answer'.*add it to this row, or drop the row"),
        ('{"question": "x", "answer": "no number here"}\n', r"d\.jsonl:1: .*no final number"),
        ("[1, 2]\n", r"d\.jsonl:1: expected a JSON object"),
        ("", "empty"),
    ],
)
def test_malformed_file_names_file_and_line(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / "d.jsonl").write_text(content)
    with pytest.raises(ConfigError, match=match):
        load(_cfg(dataset=str(tmp_path / "d.jsonl")))


def test_non_utf8_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_bytes(b'{"question": "\xff\xfe", "answer": "1"}\n')
    with pytest.raises(ConfigError, match="UTF-8"):
        load(_cfg(dataset=str(tmp_path / "d.jsonl")))
    with pytest.raises(ConfigError, match="not found"):
        load(_cfg(dataset=str(tmp_path / "missing.jsonl")))
    with pytest.raises(ConfigError, match="train.jsonl"):
        load(_cfg(dataset="gsm8k", dataset_path=str(tmp_path)))


def test_load_dataset_action(gsm8k_dir: str) -> None:
    result = RLTrainingTool().run({"action": "load_dataset", "dataset": "gsm8k", "dataset_path": gsm8k_dir, "max_samples": 3})
    assert result["num_samples"] == 3 and "prompt" in result["columns"]
    assert "Final Answer:" in result["sample"]["completion"][0]["content"]
