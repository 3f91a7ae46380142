"""`action: create_reward`: score completions with the configured reward, and their group advantages."""

from __future__ import annotations

from typing import Any

from hello_agents_rl.rewards.adapter import safe_score
from hello_agents_rl.rewards.build import build_reward
from hello_agents_rl.trajectory import advantages, split_groups


def group_advantages(rewards: list[float | None], num_generations: int, scale: bool = False) -> list[float]:
    """TRL's advantages for a flat list of rewards, consecutive groups of ``num_generations`` (each group's rule:
    `advantages` of trajectory.py)."""
    if num_generations < 1 or len(rewards) % num_generations:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {num_generations}")
    return [a for start in range(0, len(rewards), num_generations)
            for a in advantages(rewards[start:start + num_generations], scale)]


def score_completions(cfg: Any) -> dict[str, Any]:
    """Score `cfg.completions` (and group advantages when `num_generations` is set) with the configured reward."""
    reward = build_reward(cfg.reward_type, cfg.reward_config, answer_checker=cfg.answer_checker)
    truths = cfg.ground_truth if isinstance(cfg.ground_truth, list) else [cfg.ground_truth] * len(cfg.completions)
    refs = cfg.task_ref if isinstance(cfg.task_ref, list) else [cfg.task_ref] * len(cfg.completions)
    context = [{"task_ref": ref} if ref else {} for ref in refs]  # as TRL passes a row's task_ref column
    scored = [safe_score(reward, c, t, **x) for c, t, x in zip(cfg.completions, truths, context)]
    scores = [cfg.reward_failure_value if value is None else value for value, _ in scored]  # None: left out
    result: dict[str, Any] = {"status": "completed", "reward_type": reward.name, "scores": scores}
    failures = [failure for _, failure in scored if failure]
    if failures:  # the same treatment as in training: scored reward_failure_value, counted, first error shown
        result.update(reward_failures=len(failures), first_failure=failures[0])
    if len(reward.components) > 1 and not failures:
        parts = [reward.score_components(c, t, **x) for c, t, x in zip(cfg.completions, truths, context)]
        result["components"] = {name: [p[name] for p in parts] for name in parts[0]} if parts else {}
    if cfg.num_generations:
        groups = split_groups(cfg.completions, scores, cfg.num_generations)
        result["advantages"] = [a for group in groups for a in group.advantages()]
        result["varied_groups"] = sum(group.varied for group in groups)  # the groups GRPO learns from
    return result
