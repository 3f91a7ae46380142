"""Adaptive KL holds the measured KL in its target range where a fixed coefficient lets it drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hello_agents.tools import RLTrainingTool

pytestmark = pytest.mark.slow

# A learning rate high enough that the policy runs away from the reference under a fixed beta.
RUN = {
    "action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 256, "max_steps": 30,
    "batch_size": 4, "num_generations": 4, "max_new_tokens": 12, "temperature": 1.0, "learning_rate": 4e-3,
    "logging_steps": 1, "save_steps": 1000, "warmup_ratio": 0.0, "kl_coef": 0.05, "use_lora": False,
    "reward_type": "length_penalty", "reward_config": {"target_length": 10, "penalty_weight": 1.0},
}


def _logs(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"kl"' in line]


def test_adaptive_kl_holds_the_range(tiny_model: str, tmp_path: Path) -> None:
    RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "fixed")})
    result = RLTrainingTool().run({**RUN, "model_name": tiny_model, "output_dir": str(tmp_path / "adaptive"),
                                   "kl_target": [0.01, 0.1]})
    fixed, adaptive = _logs(tmp_path / "fixed"), _logs(tmp_path / "adaptive")
    late_fixed = [e["kl"] for e in fixed[-10:]]
    late_adaptive = [e["kl"] for e in adaptive[-10:]]
    assert sum(late_fixed) / 10 > 0.1, f"the fixed coefficient should drift out of range: {late_fixed}"
    assert all(0.01 <= kl <= 0.1 for kl in late_adaptive), late_adaptive
    assert result["kl_coef"] > RUN["kl_coef"], "beta was raised to pull the policy back"
    assert all("kl_coef" in e for e in adaptive[1:]), "logged as train/kl_coef"
