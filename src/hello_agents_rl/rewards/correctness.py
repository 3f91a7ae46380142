"""Is an answer right? The final number equals the ground truth's (every numeric task), or, for a row whose
`task_ref` names a reasoning-gym entry, that task's own `score_answer` gives full marks: the library's checker,
never a rewrite of it. The entry is regenerated from (task, parameters, seed, index).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards.parsing import MARKER_RE, extract_answer, parse_ground_truth, same_number

INSTALL = "pip install 'hello-agents-rl[tasks]'"


def library() -> Any:
    """reasoning_gym.factory, or a ConfigError that says how to install it."""
    try:
        import reasoning_gym.factory
    except ImportError as error:
        raise ConfigError(f"`dataset`: reasoning-gym tasks need the reasoning-gym package ({error}); {INSTALL}") from None
    return reasoning_gym.factory


@functools.lru_cache(maxsize=32)
def generator(name: str, params_json: str, seed: int) -> Any:
    return library().create_dataset(name, seed=seed, **json.loads(params_json))


@functools.lru_cache(maxsize=4096)
def _entry(name: str, params_json: str, seed: int, index: int) -> dict[str, Any]:
    return generator(name, params_json, seed)[index]  # regenerating an entry is not free


def task_ref(name: str, params: dict[str, Any], seed: int, index: int) -> str:
    return json.dumps({"task": name, "params": params, "seed": seed, "index": index}, sort_keys=True)


def task_score(ref: str, answer: str | None) -> float:
    """The task's own checker on `answer` (text, possibly a list or a grid written out): 0..1."""
    parsed = json.loads(ref)
    key = (parsed["task"], json.dumps(parsed["params"], sort_keys=True), parsed["seed"])
    return float(generator(*key).score_answer(answer, _entry(*key, parsed["index"])))


_DECORATION = " \t*`$\"'"


def text_answer(completion: str) -> str | None:
    """The answer as text: the first non-empty line after the last marker ("Final Answer:", "\\boxed{", "The
    answer is", "answer:"), else the last non-empty line; bold, quotes and a final full stop stripped."""
    text = str(completion or "")
    markers = list(MARKER_RE.finditer(text))
    rest = text[markers[-1].end():] if markers else text
    lines = [line.strip(_DECORATION) for line in rest.splitlines() if line.strip(_DECORATION)]
    if not lines:
        return None
    line = lines[0] if markers else lines[-1]
    if markers and markers[-1].group().lower().startswith("\\boxed"):
        line = line.split("}", 1)[0]
    line = line.removeprefix(":").strip(_DECORATION)
    return line[:-1].strip(_DECORATION) if line.endswith(".") and not line.endswith("..") else line or None


def task_answer(completion: str, ground_truth: object) -> str | None:
    """What the task's checker is given. A task whose answer is a number gets the final number read as for every
    numeric task (rewards.extract_answer), in the task's own spelling when it is equal; any other answer is text."""
    truth = parse_ground_truth(ground_truth)
    if truth is None:
        return text_answer(completion)
    value = extract_answer(completion)
    if value is None:
        return None
    if value == truth:
        return str(ground_truth).strip()
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def is_correct(completion: str, ground_truth: object, task_ref: str | None = None) -> bool:
    """Right: the task's own checker gives full marks (partial credit would break the reward's bound), or, with
    no task, the final number equals the ground truth's. An unreadable answer or truth is never right."""
    if task_ref:
        return task_score(task_ref, task_answer(completion, ground_truth)) >= 1.0
    return same_number(completion, ground_truth)
