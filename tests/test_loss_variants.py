"""Every TRL 1.16 GRPO loss and its companions: refused where TRL refuses (or computes what no paper meant),
before anything loads or is written; passed to TRL's GRPOConfig under TRL's names otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.config.loss import COMPANIONS
from hello_agents_rl.trainers.args import trl_args
from hello_agents_rl.workflows.actions import parse

# (keys, the key our message names, the fix it gives) -- README "Loss variants" lists the same
REFUSED = [
    ({"loss_type": "luspo"}, "importance_sampling_level", "set importance_sampling_level: sequence"),
    ({"loss_type": "vespo", "importance_sampling_level": "sequence"}, "importance_sampling_level", "leave importance_sampling_level at token"),
    ({"loss_type": "cispo"}, "clip_range_high", "clip_range_high: 5"),
    ({"loss_type": "cispo", "clip_range_high": 0.28}, "clip_range_high", "any value >= 1"),
    ({"sapo_temperature_neg": 1.2}, "sapo_temperature_neg", "set loss_type: sapo"),
    ({"loss_type": "grpo", "vespo_lambda_neg": 1.0}, "vespo_lambda_neg", "set loss_type: vespo"),
    ({"loss_type": "vespo", "clip_range_high": 0.28}, "clip_range_high", "remove it"),
    ({"top_entropy_quantile": 1.5}, "top_entropy_quantile", "less than or equal to 1"),
    ({"clip_range_high": 0}, "clip_range_high", "greater than 0"),
    ({"loss_type": "ppo"}, "loss_type", "'vespo'"),
    ({"lora_target_modules": ["q_proj", "lm_head"]}, "lora_target_modules", "remove 'lm_head'"),
    ({"dynamic_sampling_rounds": 3}, "dynamic_sampling_rounds", "dynamic_sampling: resample"),
    ({"algorithm": "sft", "dynamic_sampling": "skip"}, "dynamic_sampling", "remove it"),
    ({"dynamic_sampling": "sometimes"}, "dynamic_sampling", "'resample'"),
]


@pytest.mark.parametrize(("override", "key", "fix"), REFUSED, ids=[f"{r[1]}-{i}" for i, r in enumerate(REFUSED)])
def test_a_setting_trl_refuses_is_a_config_error_naming_the_fix(override: dict, key: str, fix: str,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"`{key}`") as caught:
        RLTrainingTool().run({"action": "train", "output_dir": str(tmp_path / "out"), **override})
    assert fix in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_whole_config_written_back_is_not_refused_for_its_defaults() -> None:
    """results.json's config gives every key, companions at their defaults: only changed ones count as set."""
    cfg = parse({"loss_type": "luspo", "importance_sampling_level": "sequence", "output_dir": "/tmp/x"})
    again = parse(cfg.model_dump())
    assert again.loss_type == "luspo" and again.sapo_temperature_neg == 1.05


CASES = {
    "grpo": {}, "dapo": {"clip_range_high": 0.28}, "dr_grpo": {}, "bnpo": {"mask_truncated_completions": True},
    "cispo": {"clip_range_high": 5.0}, "sapo": {"sapo_temperature_pos": 0.9, "sapo_temperature_neg": 1.2},
    "luspo": {"importance_sampling_level": "sequence"}, "vespo": {"vespo_k_pos": 1.5, "vespo_lambda_neg": 2.5},
}


@pytest.mark.parametrize("loss_type", CASES)
def test_every_loss_type_reaches_trls_config_under_trls_names(loss_type: str) -> None:
    from trl import GRPOConfig

    keys = {"loss_type": loss_type, "top_entropy_quantile": 0.2, "num_generations": 3, "eval_steps": 5,
            **CASES[loss_type]}
    cfg = parse({**keys, "output_dir": "/tmp/x", "report_to": "none"})
    args = GRPOConfig(**trl_args(cfg))  # TRL's own checks pass (an eval batch of whole groups of 3, too)
    assert args.loss_type == loss_type and args.top_entropy_quantile == 0.2
    assert args.importance_sampling_level == keys.get("importance_sampling_level", "token")
    assert args.epsilon_high == keys.get("clip_range_high") and args.epsilon == cfg.clip_range
    assert args.mask_truncated_completions == keys.get("mask_truncated_completions", False)
    for key in (k for ks in COMPANIONS.values() for k in ks):
        assert getattr(args, key) == getattr(cfg, key), key
    assert args.per_device_eval_batch_size % cfg.num_generations == 0
