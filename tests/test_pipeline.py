"""The book's 11.6 flow as one action: base -> SFT -> GRPO, evaluated at each stage, with a report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"


def test_pipeline_end_to_end(tiny_model: str, tmp_path: Path) -> None:
    root = tmp_path / "pipeline"
    result = RLTrainingTool().run({
        "action": "pipeline", "model_name": tiny_model, "output_dir": str(root), "dataset": "arithmetic",
        "max_samples": 64, "use_lora": False,
        "sft": {"num_epochs": 2, "batch_size": 16, "learning_rate": 2e-3, "logging_steps": 2, "save_steps": 100},
        "grpo": {"max_samples": 16, "num_epochs": 1, "batch_size": 4, "num_generations": 4, "max_new_tokens": 16,
                 "learning_rate": 1e-4, "logging_steps": 1, "save_steps": 100, "temperature": 1.0},
        "evaluation": {"max_samples": 20, "max_new_tokens": 16},
    })
    assert [row["model"] for row in result["comparison"]] == ["base", "sft", "grpo"]
    for name in ("training_results.json", "report.md", "report.html", "sft/model/config.json", "grpo/model/config.json",
                 "sft/metrics.jsonl", "grpo/metrics.jsonl"):
        assert (root / name).is_file(), name
    saved = json.loads((root / "training_results.json").read_text())
    assert saved["comparison"] == result["comparison"]
    pngs = sorted(root.glob("*.png"))
    assert {p.name for p in pngs} == {"sft_curves.png", "grpo_curves.png", "accuracy.png"}
    assert all(p.read_bytes().startswith(PNG) and p.stat().st_size > 5000 for p in pngs)
    report = (root / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith(("| base ", "| sft ", "| grpo "))]
    assert len(rows) == 3, "a comparison table with three rows"
    assert "## Training doctor" in report and "## Sample answers" in report
    page = (root / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3, "self-contained: the plots are inlined"


def test_pipeline_cli_validates_before_training(tmp_path: Path, capsys) -> None:
    from hello_agents_rl.interfaces.cli import main

    config = tmp_path / "run.yaml"
    config.write_text("model_name: Qwen/Qwen3-0.6B\ngrpo:\n  kl_coeff: 0.1\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["pipeline", "--config", str(config), "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "grpo.kl_coeff" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_pipeline_with_tools_evaluates_every_stage_with_them(tmp_path: Path) -> None:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    model = str(build_tiny_tool_model(tmp_path / "tiny_tools"))
    root = tmp_path / "pipeline"
    result = RLTrainingTool().run({
        "action": "pipeline", "model_name": model, "output_dir": str(root), "dataset": "multiplication",
        "tools": ["calculator"], "max_tool_turns": 2, "max_samples": 16, "report_to": "none",
        "sft": {"max_steps": 2, "batch_size": 8},
        "grpo": {"max_steps": 1, "batch_size": 2, "num_generations": 2, "max_new_tokens": 24},
        "evaluation": {"max_samples": 4, "max_new_tokens": 24},
    })
    assert [row["model"] for row in result["comparison"]] == ["base", "sft", "grpo"]
    assert all("tool_call_rate" in row and "failed_call_rate" in row for row in result["comparison"])
    header = next(line for line in (root / "report.md").read_text().splitlines() if line.startswith("| Model"))
    assert "Tool calls" in header and "Failed calls" in header


def test_pipeline_and_search_evaluate_with_the_training_tools(tmp_path: Path) -> None:
    from hello_agents_rl.workflows.actions import parse

    pipeline = parse({"action": "pipeline", "dataset": "multiplication", "tools": ["calculator"], "max_tool_turns": 3,
                      "output_dir": str(tmp_path / "p")})
    evaluation = pipeline.evaluation_config(str(tmp_path))
    assert evaluation.tools == ["calculator"] and evaluation.max_tool_turns == 3 and evaluation.split == "test"
