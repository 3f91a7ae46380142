"""Credit per step for tool-using rollouts (`step_credit`), after GiGPO (Feng et al., 2025, verl-agent).

GRPO gives every token of a rollout one advantage: its reward against its group's mean. A chain of tool calls is
several decisions, and a rollout that took the right first three steps and a wrong fourth gets the same blame on all
four. GiGPO adds a second, step-level comparison: rollouts of one group that reached the same state compare the
actions they took from it, by the returns those actions led to.

Here, as the knowledge-base tasks make natural, a state is "this question, and these tool results so far": the
step that follows k results is grouped with every other step of the group that follows the same k results. Each
token of step k gets

    A(i, k) = A_episode(i) + step_credit * (R(i) - mean R over the rollouts whose step k follows the same results)

How it differs from the paper: the return is the rollout's final reward, undiscounted (these rewards come at the
end only, and the chains are short); the step groups are found by exact equality of the tool results read, not by
the environment's state hash; the step term is not divided by its group's std (scale_rewards "none", as the book's
GRPO); the first step's group is the whole group, so it adds `step_credit` times the episode advantage there, as
the paper's does. A state that only one rollout reached adds nothing. Tokens of tool results are masked out of the
loss anyway (TRL's tool mask); a rollout's steps are its runs of model tokens between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from trl import GRPOTrainer

TrlGRPOTrainer: Any = GRPOTrainer  # typed loosely: TRL's attributes are Optional until its __init__ sets them


def steps_of(tool_mask: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B, T]: the step index of each model token (0 for the first run of model tokens, 1 after the first
    tool result, ...), -1 for tool-result and padding tokens."""
    model = (tool_mask.bool() & completion_mask.bool()).long()
    # a step starts at a model token whose previous token was not a model token (the start, or a tool result)
    previous = torch.nn.functional.pad(model[:, :-1], (1, 0))
    starts = model * (1 - previous)
    index = torch.cumsum(starts, dim=1) - 1
    return torch.where(model.bool(), index, torch.full_like(index, -1))


Results = tuple[str, ...]  # the tool results one round of calls returned


def results_read(completion: Any) -> list[Results]:
    """The tool results a rollout read, round by round (TRL's messages: a run of tool messages is one round)."""
    rounds: list[Results] = []
    previous = None
    for message in completion if isinstance(completion, list) else []:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            content = str(message.get("content", ""))
            rounds[-1:] = [rounds[-1] + (content,)] if previous == "tool" else [*rounds[-1:], (content,)]
        previous = role
    return rounds


def step_advantages(results: Sequence[Sequence[Results]], rewards: Sequence[float], steps: Sequence[int],
                    group_size: int) -> list[list[float]]:
    """Per rollout, per step: R(i) minus the mean return of the rollouts in its group whose same step follows the
    same tool results. `results[i]`: the rounds of results rollout i read; `steps[i]`: how many steps it took (runs
    of model tokens); rewards: [B*G] in TRL's order, groups of `group_size` consecutive rollouts, NaN for a
    rollout no reward scored (left out of every mean, its own terms 0)."""
    out: list[list[float]] = []
    for start in range(0, len(rewards), group_size):
        members = [i for i in range(start, start + group_size)]
        returns: dict[tuple[int, tuple[Results, ...]], list[float]] = {}
        for i in members:
            if not math.isnan(rewards[i]):
                for k in range(steps[i]):
                    returns.setdefault((k, tuple(results[i][:k])), []).append(float(rewards[i]))
        for i in members:
            if math.isnan(rewards[i]):
                out.append([0.0] * steps[i])
                continue
            state = [returns[(k, tuple(results[i][:k]))] for k in range(steps[i])]
            out.append([float(rewards[i]) - sum(same) / len(same) for same in state])
    return out


def per_token(advantages: torch.Tensor, step_index: torch.Tensor, step_terms: Sequence[Sequence[float]],
              weight: float) -> torch.Tensor:
    """[B] episode advantages -> [B, T]: each model token's episode advantage plus `weight` times its step's term;
    tool-result and padding tokens keep the episode advantage (the loss masks them)."""
    out = advantages.unsqueeze(1).expand_as(step_index).clone().float()
    for row, terms in enumerate(step_terms):
        for k, term in enumerate(terms):
            out[row][step_index[row] == k] += weight * term
    return out.to(advantages.dtype)


class StepCredit(TrlGRPOTrainer):
    """GRPO whose tool-using rollouts get the step term on each step's tokens; composed over the run's trainer in
    trainers/build.py, with `step_credit` (the weight) set there. One process: the rewards TRL gathers and the
    completions this process sampled are the same rollouts only then (trainers/preflight.py refuses more)."""

    step_credit: float = 0.0

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._scored = (completions, rewards_per_func)  # [B] messages, [B, reward functions]
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training or output.get("tool_mask") is None:
            return output
        completions, per_func = self._scored
        rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)  # as TRL sums
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        steps = steps_of(output["tool_mask"], output["completion_mask"])  # [B, T]
        counts = (steps.max(dim=1).values + 1).tolist()
        terms = step_advantages([results_read(c) for c in completions], rewards.tolist(), counts, self.num_generations)
        output["advantages"] = per_token(output["advantages"], steps, terms, self.step_credit)  # [B] -> [B, T]
        return output
