"""Rewards for GRPO on math word problems, plain and tool-using.

- `parsing`: the model's final number, the ground truth's, the format and the arithmetic steps.
- `correctness`: is an answer right (the final number, or a reasoning-gym task's own checker).
- `terms`: the table of built-in terms (name -> function, parameters with their checks, place in the bound).
- `build`: `build_reward` validates a config (tool shaping included) into a `Reward`, within one bound.
- `adapter`: `to_trl_reward`, the one adapter to TRL's reward calling convention (completions or trajectories).
- `scoring`: `action: create_reward` and group advantages.
"""

from hello_agents_rl.rewards.adapter import safe_score, to_trl_reward
from hello_agents_rl.rewards.build import Reward, RewardComponent, answer_text, build_reward, with_tool_shaping
from hello_agents_rl.rewards.correctness import is_correct
from hello_agents_rl.rewards.parsing import (
    ANSWER_FORMAT,
    arithmetic_steps,
    count_steps,
    extract_answer,
    follows_format,
    numbers_in,
    parse_ground_truth,
    parse_number,
)
from hello_agents_rl.rewards.scoring import group_advantages, score_completions
from hello_agents_rl.rewards.terms import (
    REWARD_NAMES,
    TERMS,
    TOOL_REWARD_KEYS,
    accuracy_score,
    call_bonus_score,
    failed_call_score,
    length_penalty_score,
    step_score,
)

__all__ = [
    "ANSWER_FORMAT", "REWARD_NAMES", "TERMS", "TOOL_REWARD_KEYS", "Reward", "RewardComponent", "accuracy_score",
    "answer_text", "arithmetic_steps", "build_reward", "call_bonus_score", "count_steps", "extract_answer",
    "failed_call_score", "follows_format", "group_advantages", "is_correct", "length_penalty_score", "numbers_in",
    "parse_ground_truth", "parse_number", "safe_score", "score_completions", "step_score", "to_trl_reward",
    "with_tool_shaping",
]
