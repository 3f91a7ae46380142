"""RLTrainingTool: a dict in, a dict of plain JSON values out. Nothing else lives here."""

from __future__ import annotations

from typing import Any

from hello_agents.rl import config as config_layer
from hello_agents.rl.config import CONFIGS, describe_fields


class RLTrainingTool:
    """SFT and GRPO training, evaluation, datasets and rewards (Hello-Agents, section 11.4)."""

    name = "rl_training"
    description = "Fine-tune small language models with SFT and GRPO; evaluate them; inspect datasets and rewards."

    def run(self, params: dict[str, Any]) -> dict[str, Any]:
        cfg = config_layer.parse(params)  # raises ConfigError before anything loads
        action = cfg.action
        if action == "train":
            from hello_agents.rl.trainers.run import train

            return train(cfg)
        if action == "evaluate":
            from hello_agents.rl.evaluate import run

            return run(cfg)
        if action == "pipeline":
            from hello_agents.rl.pipeline import run_pipeline

            return run_pipeline(cfg)
        if action == "compare":
            from hello_agents.rl.evaluate import compare

            return compare(cfg)
        if action == "export":
            from hello_agents.rl.export import export

            return export(cfg.model_path, cfg.output_dir, cfg.trust_remote_code)
        if action == "load_dataset":
            return _describe_dataset(cfg)
        return _score(cfg)

    def get_parameters(self) -> dict[str, list[dict[str, str]]]:
        """The parameter schema per action, generated from the config models."""
        return {
            action: [{"name": n, "default": d, "description": text} for n, d, text in describe_fields(model)]
            for action, model in CONFIGS.items()
        }


def _describe_dataset(cfg: Any) -> dict[str, Any]:
    from hello_agents.rl import data

    rows = data.load(cfg)
    sample = rows[0]
    return {
        "status": "completed",
        "num_samples": len(rows),
        "columns": rows.column_names,
        "sample": {"prompt": sample["prompt"], "completion": sample["completion"], "ground_truth": sample["ground_truth"]},
    }


def _score(cfg: Any) -> dict[str, Any]:
    from hello_agents.rl.errors import ConfigError
    from hello_agents.rl.rewards import build_reward, group_advantages

    reward = build_reward(cfg.reward_type, cfg.reward_config)
    truths = cfg.ground_truth if isinstance(cfg.ground_truth, list) else [cfg.ground_truth] * len(cfg.completions)
    if len(truths) != len(cfg.completions):
        raise ConfigError(
            f"`ground_truth`: {len(truths)} values for {len(cfg.completions)} completions; give one value, or one per completion"
        )
    scores = [reward.score(c, t) for c, t in zip(cfg.completions, truths)]
    result: dict[str, Any] = {"status": "completed", "reward_type": reward.name, "scores": scores}
    if len(reward.components) > 1:
        parts = [reward.score_components(c, t) for c, t in zip(cfg.completions, truths)]
        result["components"] = {name: [p[name] for p in parts] for name in parts[0]} if parts else {}
    if cfg.num_generations:
        result["advantages"] = group_advantages(scores, cfg.num_generations)
    return result
