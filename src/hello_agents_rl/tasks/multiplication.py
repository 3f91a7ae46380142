"""The tool-use task: "What is A * B?" with A in 100..999 and B in 11..99 (not a multiple of 10).

Too hard for a tiny model in its head, easy with the calculator. The held-out test questions are fixed
(seeded once) and never drawn for training. The imperfect demonstrator calls the calculator only part
of the time; otherwise it answers from a flawed mental method (rounding B to the nearest ten), which is
always wrong on these questions. That is what lets the tool demo show RL learning *when* to call a tool.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hello_agents_rl.tasks.base import Task, TaskConfig, share
from hello_agents_rl.tasks.formatting import build_messages

TEST_QUESTIONS = 250
_SPLIT_SEED = 4321  # fixed: the held-out set must not move with the run's seed


def _all_pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in range(100, 1000) for b in range(11, 100) if b % 10]


def split_pairs(split: str) -> list[tuple[int, int]]:
    pairs = _all_pairs()
    random.Random(_SPLIT_SEED).shuffle(pairs)
    return sorted(pairs[:TEST_QUESTIONS]) if split == "test" else pairs[TEST_QUESTIONS:]


def mental_estimate(a: int, b: int) -> int:
    """The demonstrator's flawed method: round B to the nearest ten and multiply (never exact here)."""
    return a * (round(b / 10) * 10)


def demonstrate(a: int, b: int, use_tool: bool) -> list[dict]:
    """One transcript: a calculator call, its result and the answer; or the mental estimate."""
    if not use_tool:  # the estimate is written out, so "Final Answer:" always repeats a number in context
        return [{"role": "assistant", "content": f"{a} * {b} is about {a} * {round(b / 10) * 10} = "
                 f"{mental_estimate(a, b)}. Final Answer: {mental_estimate(a, b)}"}]
    call = {"type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": f"{a} * {b}"})}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculator", "content": str(a * b)},
        {"role": "assistant", "content": f"Final Answer: {a * b}"},
    ]


def make_dataset(
    split: str = "train",
    num_samples: int | None = None,
    seed: int = 42,
    tool_rate: float = 1.0,
    system_prompt: str | None = None,
) -> Any:
    """None = every question of the split once; N = N seeded draws. `tool_rate`: how often the demonstrator calls."""
    from datasets import Dataset

    rng = random.Random(seed)
    pairs = split_pairs(split)
    if num_samples is None:
        chosen = pairs
    elif num_samples <= len(pairs):  # distinct questions while there are enough
        chosen = rng.sample(pairs, num_samples)
    else:
        chosen = [rng.choice(pairs) for _ in range(num_samples)]
    rows: dict[str, list] = {"prompt": [], "completion": [], "ground_truth": [], "question": []}
    for a, b in chosen:
        question = f"What is {a} * {b}?"
        rows["question"].append(question)
        rows["prompt"].append(build_messages(question, system_prompt))
        rows["completion"].append(demonstrate(a, b, rng.random() < tool_rate))
        rows["ground_truth"].append(str(a * b))
    return Dataset.from_dict(rows)


class MultiplicationConfig(TaskConfig):
    tool_rate: float = share(1.0, "how often the demonstrator calls the calculator")


class Multiplication(Task):
    """`dataset: multiplication`: the tool-use task, answered with the calculator."""

    name = "multiplication"
    Config = MultiplicationConfig
    max_tool_turns = 2  # a call, then the answer
    demonstrator = "calls the calculator only part of the time"

    def rows(self, split: str, count: int | None = None, seed: int = 42, system_prompt: str | None = None) -> Any:
        """N = N seeded draws (distinct while the split has enough)."""
        return make_dataset(split, count, seed, self.config.tool_rate, system_prompt)

    def tools(self) -> list[Any]:
        return ["calculator"]
