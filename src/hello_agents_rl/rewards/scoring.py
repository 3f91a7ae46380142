"""`action: create_reward`: score completions with the configured reward, and their group advantages."""

from __future__ import annotations

import statistics
from typing import Any

from hello_agents_rl.rewards.adapter import safe_score
from hello_agents_rl.rewards.build import build_reward


def group_advantages(rewards: list[float | None], num_generations: int, scale: bool = False) -> list[float]:
    """r - mean(group) per consecutive group of ``num_generations``; / (std + 1e-4) if scale.

    std is the sample standard deviation (as torch.std in TRL); 0 for a group of one. A None reward (the
    reward failed) is left out of its group's mean and std and gets advantage 0, as in TRL.
    """
    if num_generations < 1 or len(rewards) % num_generations:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {num_generations}")
    out: list[float] = []
    for start in range(0, len(rewards), num_generations):
        group = rewards[start:start + num_generations]
        scored = [float(r) for r in group if r is not None]
        mean = statistics.fmean(scored) if scored else 0.0
        std = statistics.stdev(scored) if len(scored) > 1 else 0.0
        out.extend(0.0 if r is None else (r - mean) / (std + 1e-4) if scale else r - mean for r in group)
    return out


def score_completions(cfg: Any) -> dict[str, Any]:
    """Score `cfg.completions` (and group advantages when `num_generations` is set) with the configured reward."""
    reward = build_reward(cfg.reward_type, cfg.reward_config)
    truths = cfg.ground_truth if isinstance(cfg.ground_truth, list) else [cfg.ground_truth] * len(cfg.completions)
    scored = [safe_score(reward, c, t) for c, t in zip(cfg.completions, truths)]
    scores = [cfg.reward_failure_value if value is None else value for value, _ in scored]  # None: left out
    result: dict[str, Any] = {"status": "completed", "reward_type": reward.name, "scores": scores}
    failures = [failure for _, failure in scored if failure]
    if failures:  # the same treatment as in training: scored reward_failure_value, counted, first error shown
        result.update(reward_failures=len(failures), first_failure=failures[0])
    if len(reward.components) > 1 and not failures:
        parts = [reward.score_components(c, t) for c, t in zip(cfg.completions, truths)]
        result["components"] = {name: [p[name] for p in parts] for name in parts[0]} if parts else {}
    if cfg.num_generations:
        result["advantages"] = group_advantages(scores, cfg.num_generations)
    return result
