"""The one adapter to TRL's reward calling convention, for plain completions and tool trajectories alike.

TRL calls ``reward(prompts=, completions=, completion_ids=, **dataset columns, trainer_state=, log_extra=,
log_metric=[, environments=])`` and reads one float or None per completion (None: left out of its group's
mean and std, advantage 0). A completion whose scoring raises or gives no finite number gets the run's
`reward_failure_value` and is counted, the same in a plain run and a tool run.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards.build import Reward, answer_text
from hello_agents_rl.rewards.parsing import follows_format
from hello_agents_rl.trajectory import read_trajectory


def safe_score(
    reward: Reward, completion: object, ground_truth: object, **context: Any
) -> tuple[float | None, str | None]:
    """(score, None), or (None, the traceback) when the reward raised or gave no finite number (a str, a list...)."""
    try:
        return reward.score(completion, ground_truth, **context), None
    except Exception:  # noqa: BLE001 - one bad completion must not kill the run
        return None, traceback.format_exc()


def to_trl_reward(reward: Reward, failure_reward: float | None = None) -> Callable[..., list[float | None]]:
    """Wrap ``reward`` as a TRL GRPOTrainer reward function (``__name__`` = reward.name).

    A completion whose scoring raises or returns None/NaN/inf gets ``failure_reward``;
    ``adapter.failures`` counts them and ``adapter.first_failure`` keeps the first traceback. Logs the
    format rate per step and, in a tool run, the share of rollouts that called a tool (`tools/call_rate`),
    that ended on a call, unanswered (`tools/turns_exhausted`; `tools/budget_exhausted`: of them, those
    max_new_tokens stopped, not the turn limit), and that were malformed (`tools/malformed_rate`).
    """

    def adapter(prompts: Any = None, completions: Any = None, completion_ids: Any = None,
                **kwargs: Any) -> list[float | None]:
        completions = list(completions or [])
        truths = kwargs.pop("ground_truth", None)
        if truths is None and reward.needs_truth:
            raise ConfigError("`ground_truth`: the dataset has no 'ground_truth' column. "
                              "Fix: add a ground_truth column holding each problem's answer")
        n = len(completions)
        columns = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n and k != "environments"}
        if isinstance(prompts, list) and len(prompts) == n:
            columns["prompt"] = prompts  # per-row context for custom callables
        scores = []
        for i, completion in enumerate(completions):
            value, failure = safe_score(reward, completion, truths[i] if truths is not None else None,
                                        **{k: v[i] for k, v in columns.items()})
            if failure:
                adapter.failures += 1
                adapter.first_failure = adapter.first_failure or failure
            scores.append(failure_reward if value is None else value)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:  # the doctor watches format correctness beside the reward
            refs = columns.get("task_ref") or [None] * n  # a reasoning-gym row's answer may be text
            log_metric("format", sum(follows_format(answer_text(c), bool(r)) for c, r in zip(completions, refs)) / n)
            if reward.max_tool_turns is not None:
                trajectories = [read_trajectory(c) for c in completions]
                log_metric("tools/call_rate", sum(t.calls > 0 for t in trajectories) / n)
                log_metric("tools/turns_exhausted", sum(t.turns_exhausted for t in trajectories) / n)
                log_metric("tools/budget_exhausted",  # of those, the ones max_new_tokens stopped, not the turn limit
                           sum(t.stopped_by(reward.max_tool_turns) == "budget" for t in trajectories) / n)
                log_metric("tools/malformed_rate", sum(t.malformed_calls > 0 for t in trajectories) / n)
        return scores

    adapter.failures = 0  # type: ignore[attr-defined]
    adapter.first_failure = None  # type: ignore[attr-defined]
    adapter.__name__ = adapter.__qualname__ = reward.name
    return adapter
