"""The table of built-in reward terms: name -> function, parameters with their checks, place in the bound.

Every term is a pure function ``score(completion, ground_truth, **params) -> float``. Adding a term is one
entry in `TERMS`: `build_reward` accepts it, checks its parameters and the bound, the JSON schema lists it.

The bound "a wrong answer never outscores a right one" is summed over the terms: per unit of weight, each
term says the most it can give a wrong answer and the least it can give a right one (`bound`). Tool terms
read the trajectory's `tool_stats`; the failed-call penalty counts at most `max_tool_turns` calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hello_agents_rl.rewards.correctness import is_correct
from hello_agents_rl.rewards.parsing import count_steps
from hello_agents_rl.trajectory import grounded_calls


def accuracy_score(completion: str, ground_truth: object, task_ref: str | None = None, answer_checker: str = "number",
                   **_: Any) -> float:
    """1 for a right final answer (a reasoning-gym row: its task's own checker; else the run's answer_checker)."""
    return 1.0 if is_correct(completion, ground_truth, task_ref, answer_checker) else 0.0


def length_penalty_score(
    completion: str, ground_truth: object = None, target_length: int = 200, **_: Any
) -> float:
    """In [-1, 0]: characters beyond ``target_length``, relative to it (no tokenizer)."""
    overshoot = max(0, len(completion.strip()) - target_length)
    return -min(1.0, overshoot / target_length)


def step_score(
    completion: str, ground_truth: object, step_bonus: float = 0.1, max_steps: int = 5, task_ref: str | None = None,
    answer_checker: str = "number", trajectory: Any = None, prompt: Any = None, **_: Any,
) -> float:
    """step_bonus per step of a right answer, at most max_steps: the reasoning lines of a plain answer; in a tool run
    each distinct tool call that worked with arguments taken from the question or an earlier result (a process
    reward for the agent's steps: repeating one call, or calling with made-up arguments, earns nothing more)."""
    # Gated on correctness: shaping must never make a wrong answer outscore a right one.
    if not is_correct(completion, ground_truth, task_ref, answer_checker):
        return 0.0
    steps = grounded_calls(trajectory, prompt) if isinstance(trajectory, list) else count_steps(completion)
    return step_bonus * min(steps, max_steps)


def call_bonus_score(completion: str, ground_truth: object, tool_stats: dict[str, Any], **_: Any) -> float:
    """1 once per rollout with at least one tool call that worked, whatever the answer."""
    return 1.0 if tool_stats["calls"] > tool_stats["failed_calls"] else 0.0


def failed_call_score(
    completion: str, ground_truth: object, tool_stats: dict[str, Any], max_tool_turns: int, **_: Any
) -> float:
    """-1 per failed tool call, for at most ``max_tool_turns`` calls."""
    return -float(min(tool_stats["failed_calls"], max_tool_turns))


@dataclass(frozen=True)
class Param:
    default: float
    minimum: float
    integer: bool = False


@dataclass(frozen=True)
class Term:
    fn: Callable[..., float]
    params: dict[str, Param] = field(default_factory=dict)
    # Per unit of weight: (the most a wrong answer gets, the least a right one gets).
    bound: tuple[int, int] = (0, 0)
    per_tool_turn: bool = False  # the bound counts once per tool turn (at most max_tool_turns)
    needs_truth: bool = False  # reads the ground_truth column
    tool_shaping: bool = False  # a `tool_reward` key whose value is its weight, not a `reward_type`
    # reward_type: <name> is accuracy (weight 1) plus this term, weighted by reward_config[weight_key]
    weight_key: str | None = None
    default_weight: float = 1.0


TERMS: dict[str, Term] = {
    "accuracy": Term(accuracy_score, bound=(0, 1), needs_truth=True),
    "length_penalty": Term(length_penalty_score, {"target_length": Param(200, 1, integer=True)}, bound=(0, -1),
                           weight_key="penalty_weight", default_weight=0.5),
    "step": Term(step_score, {"step_bonus": Param(0.1, 0), "max_steps": Param(5, 1, integer=True)},
                 needs_truth=True),  # gated on correctness: 0 for a wrong answer, >= 0 for a right one
    "call_bonus": Term(call_bonus_score, bound=(1, 0), tool_shaping=True),
    "failed_call_penalty": Term(failed_call_score, bound=(0, -1), per_tool_turn=True, tool_shaping=True),
}
# What `reward_type` accepts by name (the JSON schema's enum); "combined" sums `reward_config.components`.
REWARD_NAMES: tuple[str, ...] = (*(name for name, term in TERMS.items() if not term.tool_shaping), "combined")
TOOL_REWARD_KEYS: tuple[str, ...] = tuple(name for name, term in TERMS.items() if term.tool_shaping)
TERM_OF: dict[Callable[..., float], Term] = {term.fn: term for term in TERMS.values()}
