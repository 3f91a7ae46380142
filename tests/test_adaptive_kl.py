"""Adaptive KL holds the measured KL in its target range where a fixed coefficient lets it drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool
from transformers import TrainerCallback

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


class _CrashAtStep(TrainerCallback):
    """Stands in for kill -9: the run dies after checkpoint-N is written."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if state.global_step == self.step:
            raise RuntimeError("killed")


def test_resume_continues_with_the_adapted_beta(tiny_model: str, tmp_path: Path) -> None:
    from hello_agents_rl.trainers.run import train
    from hello_agents_rl.workflows.actions import parse

    out = tmp_path / "run"
    # a range so narrow that step 2's KL falls outside it: beta moves before the checkpoint
    params = {**RUN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 4, "save_steps": 2,
              "batch_size": 2, "num_generations": 2, "max_new_tokens": 8, "lr_scheduler_type": "constant",
              "kl_target": [0.001, 0.0011], "report_to": "none"}
    with pytest.raises(RuntimeError, match="killed"):
        train(parse(params), extra_callbacks=[_CrashAtStep(2)])
    kl2 = next(e["kl"] for e in _logs(out) if e["step"] == 2)
    adapted = RUN["kl_coef"] * 1.5 if kl2 > 0.0011 else RUN["kl_coef"] / 1.5
    saved = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert saved["AdaptiveKL"]["attributes"]["beta"] == pytest.approx(adapted), "beta is part of the checkpoint"

    result = RLTrainingTool().run({**params, "resume_from_checkpoint": True})
    resumed = {e["step"]: e["kl_coef"] for e in _logs(out) if e["step"] > 2}
    assert resumed[3] == pytest.approx(adapted), f"step 3 ran with beta {resumed[3]}, not the adapted {adapted}"
    kl3 = next(e["kl"] for e in _logs(out) if e["step"] == 3)
    assert resumed[4] == pytest.approx(adapted * 1.5 if kl3 > 0.0011 else adapted / 1.5), "and adapts on from there"
    assert result["num_steps"] == 4
