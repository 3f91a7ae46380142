"""Evaluation, comparison and export on models the tests train themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool

from hello_agents_rl.tasks import arithmetic

pytestmark = pytest.mark.slow

QUESTIONS = arithmetic.make_dataset("train", 8, seed=5)


def _sft(tiny_model: str, out: Path, use_lora: bool) -> dict:
    return RLTrainingTool().run({
        "action": "train", "algorithm": "sft", "model_name": tiny_model, "output_dir": str(out),
        "dataset": QUESTIONS, "num_epochs": 80, "batch_size": 8, "learning_rate": 1e-3 if use_lora else 3e-3,
        "warmup_ratio": 0.0, "use_lora": use_lora, "lora_rank": 16, "lora_alpha": 32, "logging_steps": 20,
        "save_steps": 1000, "lr_scheduler_type": "constant",
    })


@pytest.fixture(scope="module")
def memorised(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _sft(tiny_model, tmp_path_factory.mktemp("mem") / "full", use_lora=False)


@pytest.fixture(scope="module")
def memorised_lora(memorised: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    # LoRA cannot teach a random model much (its embeddings stay random): adapt the memorised one instead
    return _sft(memorised["output_dir"], tmp_path_factory.mktemp("mem") / "lora", use_lora=True)


def _evaluate(model_path: str, **extra) -> dict:
    return RLTrainingTool().run({"action": "evaluate", "model_path": model_path, "dataset": QUESTIONS,
                                 "max_new_tokens": 24, **extra})


def test_a_model_trained_on_the_questions_gets_them_all(memorised: dict, tmp_path: Path) -> None:
    result = _evaluate(memorised["output_dir"], details_path=str(tmp_path / "eval_details.jsonl"), k=4, temperature=0.0)
    assert result["accuracy"] == 1.0 and result["format_rate"] == 1.0 and result["num_questions"] == 8
    assert result["pass_at_4"] >= result["accuracy"]
    assert result["truncation_rate"] == 0.0 and 5 < result["mean_tokens"] < 24
    details = [json.loads(line) for line in (tmp_path / "eval_details.jsonl").read_text().splitlines()]
    assert len(details) == 8 and all(d["correct"] for d in details)


def test_the_untrained_model_scores_near_zero(tiny_model: str) -> None:
    result = RLTrainingTool().run({"action": "evaluate", "model_path": tiny_model, "dataset": "arithmetic",
                                   "max_samples": 40, "max_new_tokens": 16, "k": 4, "temperature": 1.0,
                                   "return_details": True})
    assert result["accuracy"] <= 0.05 and result["pass_at_4"] >= result["accuracy"]
    assert result["truncation_rate"] > 0.5, "random models ramble until max_new_tokens"
    assert len(result["details"]) == 40


def test_lora_checkpoint_and_its_merged_export_answer_alike(memorised_lora: dict, tmp_path: Path) -> None:
    adapter = str(Path(memorised_lora["output_dir"]) / "adapter")
    exported = RLTrainingTool().run({"action": "export", "model_path": adapter, "output_dir": str(tmp_path / "merged")})
    assert exported["merged_from_adapter"] and (tmp_path / "merged" / "model.safetensors").is_file()
    card = (tmp_path / "merged" / "README.md").read_text()
    assert "base_model:" in card and "lora_rank | 16" in card and "learning_rate" in card
    a = _evaluate(adapter, return_details=True)
    b = _evaluate(str(tmp_path / "merged"), return_details=True)
    assert [d["completion"] for d in a["details"]] == [d["completion"] for d in b["details"]]
    assert a["accuracy"] >= 0.75


def test_compare_three_models(tiny_model: str, memorised: dict, memorised_lora: dict, tmp_path: Path) -> None:
    result = RLTrainingTool().run({
        "action": "compare", "dataset": QUESTIONS, "max_new_tokens": 24, "report_path": str(tmp_path / "cmp.md"),
        "models": {"base": tiny_model, "sft": memorised["output_dir"], "sft_lora": memorised_lora["output_dir"]},
    })
    assert [row["model"] for row in result["table"]] == ["base", "sft", "sft_lora"]
    assert result["table"][1]["accuracy"] > result["table"][0]["accuracy"]
    assert len(result["disagreements"]["sft right, base wrong"]) >= 6
    markdown = (tmp_path / "cmp.md").read_text()
    assert markdown.count("\n| ") == 3 and "| sft | 100.0%" in markdown


def test_paired_interval_and_mcnemar() -> None:
    from hello_agents_rl.evaluation.stats import mcnemar_p, paired_interval

    before = [True, False] * 50
    assert paired_interval(before, before) == (0.0, 0.0, 0.0) and mcnemar_p(before, before) == 1.0
    after = [True] * 100  # the 50 wrong ones all fixed, nothing lost
    gain, low, high = paired_interval(before, after)
    assert gain == 0.5 and 0.35 < low < 0.5 < high < 0.65 and mcnemar_p(before, after) < 1e-10
    with pytest.raises(ValueError, match="equal"):
        paired_interval(before, after[:10])


def test_a_question_asked_twice_counts_twice_in_the_paired_gain() -> None:
    from hello_agents_rl.evaluation.stats import paired_gain

    before = [{"question": q, "correct": False} for q in ("a", "b", "a", "c")]
    after = [{"question": q, "correct": ok} for q, ok in (("a", True), ("b", False), ("a", True), ("c", False))]
    assert paired_gain(before, after)["points"] == 50.0 and paired_gain(before, after)["questions"] == 4
    shuffled = [after[1], after[0], after[3]]  # other lists: paired by question
    assert paired_gain(before[:2] + before[3:], shuffled)["questions"] == 3
