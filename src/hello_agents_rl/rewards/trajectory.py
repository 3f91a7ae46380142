"""Rewards for tool-use trajectories: the final answer after the last tool call, plus bounded shaping.

A completion from TRL's tool loop is a list of messages: assistant turns (with `tool_calls`) and the
`tool` messages TRL appended. `accuracy` (and every built-in term) reads only the assistant's text
after the last tool result; `tool_reward` adds a bonus for a well-formed call and a penalty per failed
call, bounded by `checks.check_tool_reward` so that a wrong answer never outscores a right one. A custom
reward callable also receives `trajectory` (the messages) and `tool_stats` when it names them.
"""

from __future__ import annotations

import math
import traceback
from typing import Any, Callable

from hello_agents_rl.rewards import Reward, follows_format
from hello_agents_rl.rollouts.trajectory import read_trajectory

def trajectory_score(
    reward: Reward, completion: Any, ground_truth: Any, shaping: dict[str, float], max_tool_turns: int, **context: Any
) -> float:
    trajectory = read_trajectory(completion)
    base = reward.score(trajectory.final_text, ground_truth, trajectory=completion, tool_stats=trajectory.stats(),
                        **context)
    bonus = shaping.get("call_bonus", 0.0) if trajectory.calls > trajectory.failed_calls else 0.0
    penalty = shaping.get("failed_call_penalty", 0.0) * min(trajectory.failed_calls, max_tool_turns)
    return float(base) + bonus - penalty


def to_trl_trajectory_reward(
    reward: Reward, shaping: dict[str, float], max_tool_turns: int, failure_reward: float = 0.0
) -> Callable[..., list[float]]:
    """A TRL reward function over trajectories; counts reward failures like `rewards.to_trl_reward`.

    Also logs, per step, the share of rollouts that called a tool (`tools/call_rate`), that ended with
    the turns exhausted (`tools/turns_exhausted`) and that were malformed (`tools/malformed_rate`).
    """

    def adapter(prompts: Any = None, completions: Any = None, completion_ids: Any = None, **kwargs: Any) -> list[float]:
        completions = list(completions or [])
        truths = kwargs.pop("ground_truth", None) or [None] * len(completions)
        n = len(completions)
        columns = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n and k != "environments"}
        scores = []
        for i, completion in enumerate(completions):
            try:
                value = trajectory_score(reward, completion, truths[i], shaping, max_tool_turns,
                                         **{k: v[i] for k, v in columns.items()})
                if not math.isfinite(value):
                    raise ValueError(f"reward returned {value!r}")
                scores.append(value)
            except Exception:  # noqa: BLE001 - one bad completion must not kill the run
                adapter.failures += 1
                adapter.first_failure = adapter.first_failure or traceback.format_exc()
                scores.append(float(failure_reward))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:
            trajectories = [read_trajectory(c) for c in completions]
            log_metric("format", sum(follows_format(t.final_text) for t in trajectories) / n)
            log_metric("tools/call_rate", sum(t.calls > 0 for t in trajectories) / n)
            log_metric("tools/turns_exhausted", sum(t.turns_exhausted for t in trajectories) / n)
            log_metric("tools/malformed_rate", sum(t.malformed_calls > 0 for t in trajectories) / n)
        return scores

    adapter.failures = 0  # type: ignore[attr-defined]
    adapter.first_failure = None  # type: ignore[attr-defined]
    adapter.__name__ = adapter.__qualname__ = reward.name
    return adapter
