"""Third-party tasks from reasoning-gym: `dataset: "reasoning_gym:<task>"`, `dataset_config: {...}`.

reasoning-gym (an optional extra: `pip install 'hello-agents-rl[tasks]'`) has 100+ procedural generators, each
with its own answer checker (`score_answer`); we use both as they are. Entry i of a generator comes from
`Random(seed + i)`, so train and test take disjoint seed ranges ([seed, seed + size) and [TEST_SEED, TEST_SEED +
size)) and, because two seeds can still draw the same question, every train question whose text is in the test
split is dropped (checked, not assumed). A row carries `task_ref` (task, parameters, seed, index): the checker
(rewards/correctness.py) regenerates that entry and scores the answer against it, so no metadata has to survive a JSON
round trip.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hello_agents_rl.errors import ConfigError, did_you_mean
from hello_agents_rl.paths import TASK_PREFIX
from hello_agents_rl.rewards.correctness import generator, library, task_ref

TEST_SEED = 1_000_000_000  # fixed: the held-out split never moves with the run's seed
OWN_KEYS = ("seed",)  # set by the split, never by the user
SYSTEM_PROMPT = "Solve the task. End your reply with a last line 'Final Answer: <answer>', the answer alone."


def check(dataset: str, params: dict[str, Any]) -> None:
    """ConfigError for an unknown task (with a did-you-mean) or a parameter its generator refuses; loads no model."""
    name = dataset.removeprefix(TASK_PREFIX)
    registry = library().DATASETS
    if name not in registry:
        raise ConfigError(f"`dataset`: unknown reasoning-gym task {name!r}{did_you_mean(name, registry)} "
                          f"(tasks: {', '.join(sorted(registry))})")
    config_cls = registry[name][1]
    fields = [f.name for f in dataclasses.fields(config_cls)]
    for key in params:
        if key in OWN_KEYS:
            raise ConfigError(f"`dataset_config.{key}`: set by the split (train and test take disjoint seeds); "
                              "use the top-level `seed` to draw other training questions")
        if key not in fields:
            known = [f for f in fields if f not in OWN_KEYS]
            raise ConfigError(f"`dataset_config.{key}`: {name!r} has no parameter {key!r}{did_you_mean(key, known)} "
                              f"(it has: {', '.join(known)})")
    size = params.get("size", 500)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100_000:
        raise ConfigError(f"`dataset_config.size`: questions per split, an integer in 1..100000 (got {size!r})")
    try:
        generator(name, json.dumps(params, sort_keys=True), TEST_SEED)
    except (AssertionError, ValueError, TypeError) as error:
        raise ConfigError(f"`dataset_config`: {name!r} refuses {params}: {error or type(error).__name__}; "
                          f"see its parameters: {', '.join(f for f in fields if f not in OWN_KEYS)}") from None


def split_seed(split: str, seed: int, size: int) -> int:
    if split == "test":
        return TEST_SEED
    if not 0 <= seed <= TEST_SEED - size:  # [seed, seed + size) must stay below the test range
        raise ConfigError(f"`seed`: {seed} + {size} training questions would reach the test seeds ({TEST_SEED}); "
                          "use a smaller seed")
    return seed


def entries(dataset: str, params: dict[str, Any], split: str, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """(task_ref, entry) of one split; train entries whose question is in the test split are left out."""
    name, key = dataset.removeprefix(TASK_PREFIX), json.dumps(params, sort_keys=True)
    size = params.get("size", 500)
    start = split_seed(split, seed, size)
    drawn = generator(name, key, start)
    held_out = {e["question"] for e in generator(name, key, TEST_SEED)} if split != "test" else set()
    out = []
    for index in range(len(drawn)):
        entry = drawn[index]
        if entry["question"] not in held_out:
            out.append((task_ref(name, params, start, index), entry))
    return out
