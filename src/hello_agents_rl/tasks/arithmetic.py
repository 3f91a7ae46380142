"""The embedded task: "What is A + B?" with A in 10..99 and B in 1..9; offline, seeded, any size.

Questions are split once into a fixed held-out test set and the training rest, so no test question
is ever seen in training. A demonstrator can make the classic carry slip (A + B - 10), which is
what lets the demo show RL improving on imperfect demonstrations.
"""

from __future__ import annotations

import random
from typing import Any

from hello_agents_rl.tasks.base import Task, TaskConfig, share, subsample
from hello_agents_rl.tasks.formatting import build_messages

TEST_QUESTIONS = 250
_SPLIT_SEED = 1234  # fixed: the held-out set must not move with the run's seed


def all_pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in range(10, 100) for b in range(1, 10)]


def split_pairs(split: str) -> list[tuple[int, int]]:
    pairs = all_pairs()
    random.Random(_SPLIT_SEED).shuffle(pairs)
    return sorted(pairs[:TEST_QUESTIONS]) if split == "test" else sorted(pairs[TEST_QUESTIONS:])


def has_carry(a: int, b: int) -> bool:
    return a % 10 + b >= 10


def demonstrate(a: int, b: int, rng: random.Random, carry_error: float = 0.0) -> str:
    """The demonstrator's answer; on carry problems it forgets the carry with probability carry_error."""
    result = a + b - 10 if has_carry(a, b) and rng.random() < carry_error else a + b
    return f"{a} + {b} = {result}. Final Answer: {result}"


def make_dataset(
    split: str = "train",
    num_samples: int | None = None,
    seed: int = 42,
    carry_error: float = 0.0,
    system_prompt: str | None = None,
) -> Any:
    """None = every question of the split once; N = N seeded draws with replacement (any size: the demo's
    demonstrations and prompt streams). `max_samples` through data.load draws without replacement instead."""
    from datasets import Dataset

    rng = random.Random(seed)
    pairs = split_pairs(split)
    chosen = pairs if num_samples is None else [rng.choice(pairs) for _ in range(num_samples)]
    rows: dict[str, list[Any]] = {"prompt": [], "completion": [], "ground_truth": [], "question": [], "carry": []}
    for a, b in chosen:
        question = f"What is {a} + {b}?"
        rows["question"].append(question)
        rows["prompt"].append(build_messages(question, system_prompt))
        rows["completion"].append([{"role": "assistant", "content": demonstrate(a, b, rng, carry_error)}])
        rows["ground_truth"].append(str(a + b))
        rows["carry"].append(has_carry(a, b))
    return Dataset.from_dict(rows)


class AdditionConfig(TaskConfig):
    carry_error: float = share(0.0, "how often the demonstrator forgets a carry")


class Arithmetic(Task):
    """`dataset: arithmetic`: "What is A + B?", a plain answer; the demonstrator may forget the carry."""

    name = "arithmetic"
    Config = AdditionConfig
    demonstrator = "forgets the carry"

    def rows(self, split: str, count: int | None = None, seed: int = 42, system_prompt: str | None = None) -> Any:
        return subsample(make_dataset(split, None, seed, self.config.carry_error, system_prompt), count, seed)

    def demonstrations(self, count: int, seed: int) -> Any:
        """Seeded draws with replacement: any number of them."""
        return make_dataset("train", count, seed, self.config.carry_error, self.system_prompt)
