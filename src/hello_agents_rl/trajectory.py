"""The trajectory and the trajectory group: the rollout contract training and evaluation share.

A trajectory is what one rollout produced. A plain completion is a one-turn trajectory; a tool-using one is TRL's
list of messages (assistant turns with `tool_calls`, and the `tool` results TRL appended). A group is one prompt's
G trajectories with their rewards: what GRPO compares within. Training reads TRL's flat batch of B*G completions
as B groups (`split_groups`, the order TRL generates them in); evaluation samples one group per question.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"


@dataclass(frozen=True)
class Trajectory:
    final_text: str  # the assistant's text after the last tool result: where the answer is read
    calls: int  # tool calls TRL parsed and ran
    failed_calls: int  # ... whose result was an error (raised, hung, junk, unknown tool, bad arguments)
    malformed_calls: int  # "<tool_call>" text TRL could not parse into a call
    turns_exhausted: bool  # ended on a call with no answer after it (max_tool_turns or the length budget)
    tool_turns: int = 0  # assistant turns that made calls: max_tool_turns + 1 when the turns ran out

    def stopped_by(self, max_tool_turns: int) -> str | None:
        """Why a rollout that ended on a call stopped there: "turns" (its last call came after max_tool_turns rounds),
        "budget" (TRL drops a round whose tool result would not fit in max_new_tokens, or in the model's context
        length), None if it answered."""
        if not self.turns_exhausted:
            return None
        return "turns" if self.tool_turns > max_tool_turns else "budget"

    def stats(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "final_text"}


def _is_error(content: Any) -> bool:
    return isinstance(content, str) and content.startswith(("{'error'", '{"error"'))  # how TRL writes a failure


def read_trajectory(completion: Any) -> Trajectory:
    """Plain text (no tools) or TRL's list of messages -> what the reward needs."""
    if not isinstance(completion, list):
        text = completion if isinstance(completion, str) else str(completion)
        return Trajectory(text, 0, 0, text.count(TOOL_CALL_OPEN), False)
    messages = [m for m in completion if isinstance(m, dict)]
    tool_results = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    after = messages[tool_results[-1] + 1 :] if tool_results else messages
    assistant = [m for m in messages if m.get("role") == "assistant"]
    final_text = "\n".join(str(m.get("content") or "") for m in after if m.get("role") == "assistant")
    calls = sum(len(m.get("tool_calls") or []) for m in assistant)
    return Trajectory(
        final_text=final_text,
        calls=calls,
        # `failed`: set where the tool's own status said so (an agent's tool message, rollouts/agent_spec.py)
        failed_calls=sum(bool(messages[i].get("failed", _is_error(messages[i].get("content")))) for i in tool_results),
        malformed_calls=sum(str(m.get("content") or "").count(TOOL_CALL_OPEN) for m in assistant),
        turns_exhausted=bool(assistant) and bool(assistant[-1].get("tool_calls")),
        tool_turns=sum(bool(m.get("tool_calls")) for m in assistant),
    )


def advantages(rewards: Sequence[float | None], scale: bool = False) -> list[float]:
    """One group's [G] rewards -> [G] advantages: r - mean, / (std + 1e-4) if scale (TRL's formula).

    std is the sample standard deviation (torch.std in TRL); 0 for a group of one. A None reward (the reward failed)
    is left out of the mean and std and gets advantage 0, as in TRL.
    """
    scored = [float(r) for r in rewards if r is not None]
    mean = statistics.fmean(scored) if scored else 0.0
    std = statistics.stdev(scored) if len(scored) > 1 else 0.0
    return [0.0 if r is None else (r - mean) / (std + 1e-4) if scale else r - mean for r in rewards]


def varied(rewards: Sequence[float | None]) -> bool:
    """Whether GRPO learns anything from a group with these rewards: its scored rewards differ (TRL's zero-std test:
    torch.isclose(std, 0)); fewer than two scored rewards do not. Dynamic sampling asks the same question."""
    scored = [float(r) for r in rewards if r is not None and math.isfinite(r)]
    return len(scored) > 1 and abs(statistics.stdev(scored)) > 1e-8


@dataclass(frozen=True)
class TrajectoryGroup:
    """One prompt's G trajectories and their G rewards (None: the reward failed for that one)."""

    trajectories: tuple[Trajectory, ...]  # [G]
    rewards: tuple[float | None, ...]  # [G], in the trajectories' order

    def __post_init__(self) -> None:
        if len(self.trajectories) != len(self.rewards) or not self.rewards:
            raise ValueError(f"a group needs one reward per trajectory: {len(self.trajectories)} trajectories, "
                             f"{len(self.rewards)} rewards")

    @property
    def size(self) -> int:
        return len(self.rewards)

    def advantages(self, scale: bool = False) -> list[float]:
        return advantages(self.rewards, scale)

    @property
    def varied(self) -> bool:
        return varied(self.rewards)

    @property
    def passed(self) -> int:
        """How many trajectories scored a positive reward (evaluation scores 1.0 right, 0.0 wrong)."""
        return sum(r is not None and r > 0 for r in self.rewards)


def split_groups(completions: Sequence[Any], rewards: Sequence[float | None], group_size: int
                 ) -> list[TrajectoryGroup]:
    """TRL's flat batch, [B*G] completions (plain text or messages) and rewards, as B groups of G."""
    if group_size < 1 or len(rewards) % group_size or len(completions) != len(rewards):
        raise ValueError(f"{len(completions)} completions and {len(rewards)} rewards do not split into groups of "
                         f"{group_size}")
    trajectories = [read_trajectory(c) for c in completions]
    return [TrajectoryGroup(tuple(trajectories[i:i + group_size]), tuple(rewards[i:i + group_size]))
            for i in range(0, len(rewards), group_size)]


def called(call: Any) -> tuple[str | None, dict[str, Any] | None]:
    """A tool call's name and arguments (TRL's {"function": {...}} or the function itself; arguments a dict or a
    JSON string); None for arguments that are not a JSON object."""
    function = call.get("function", call) if isinstance(call, dict) else {}
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return function.get("name"), None
    return function.get("name"), arguments if isinstance(arguments, dict) else None


# Whole values a text shows: a name (a run of capitalised words or ids: "Kalo Venra", "Torsa Works", "P4821"), a
# number standing alone, a field between separators ("age 34"), a span in double quotes or backticks, and each leaf
# of a JSON result.
_NAME = re.compile(r"[A-Z0-9][\w-]*(?:[ \t]+[A-Z0-9][\w-]*)*")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_FIELD_SEPARATORS = re.compile(r"[,;:\n]|\.(?!\d)")
_QUOTED = re.compile(r'"([^"]+)"|`([^`]+)`|“([^”]+)”')
_EXPRESSION = re.compile(r"[\d\s.+\-*/()×÷^%]*[+\-*/×÷^%][\d\s.+\-*/()×÷^%]*")


def normal(value: Any) -> str:
    """An argument or a value as a call is compared: whitespace collapsed, case folded (a tool that reads case
    fails the other spelling, and a failed call never counts)."""
    return " ".join(str(value).split()).casefold()


def _json_leaves(text: str) -> list[str]:
    try:
        data = json.loads(text)
    except ValueError:
        return []
    leaves: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None:
            leaves.append(str(item))
    return leaves


def whole_values(text: str) -> set[str]:
    """The whole values `text` shows (its names, numbers, fields, quoted spans and JSON leaves), normalised."""
    quoted = [next(filter(None, groups)) for groups in _QUOTED.findall(text)]
    found = [*_NAME.findall(text), *_NUMBER.findall(text), *_FIELD_SEPARATORS.split(text), *quoted, *_json_leaves(text)]
    return {normal(value) for value in found if normal(value)}


def grounded_calls(completion: Any, prompt: Any = None) -> int:
    """The `step` reward's count in a tool run: distinct calls that worked, with every argument grounded, whose
    result was new.

    - Distinct: arguments are compared normalised (`normal`), so `lookup(" X")` repeats `lookup("X")`.
    - Grounded: an argument equals a whole value seen before the call (a name in the question, a field of an
      earlier result, a number seen there: `whole_values`), or is arithmetic over numbers all seen there. A
      substring of the text (one letter of a name) is not a value.
    - New: a call whose result is a value already seen, or an earlier result again, learnt nothing.
    """
    if not isinstance(completion, list):
        return 0
    messages = [m for m in completion if isinstance(m, dict)]
    question = " ".join(str(m.get("content") or "") for m in (prompt or []) if isinstance(m, dict)
                        and m.get("role") == "user")
    seen = whole_values(question)
    numbers = {float(n) for n in _NUMBER.findall(question)}  # compared by value: 12 is 12.0

    def grounded(value: Any) -> bool:
        if value is None or isinstance(value, bool):  # a flag chooses, it names nothing
            return True
        if isinstance(value, (list, tuple)):
            return all(grounded(item) for item in value)
        if isinstance(value, dict):
            return all(grounded(item) for item in value.values())
        if isinstance(value, (int, float)):
            return float(value) in numbers
        text = normal(value)
        if text in seen:
            return True
        operands = {float(n) for n in _NUMBER.findall(text)}
        return bool(_EXPRESSION.fullmatch(text)) and bool(operands) and operands <= numbers

    counted: set[tuple[str | None, str]] = set()
    results: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            content = str(message.get("content") or "")
            if not message.get("failed", _is_error(message.get("content"))):  # an error echoing a made-up value
                seen |= whole_values(content)                                 # does not make it seen
                numbers |= {float(n) for n in _NUMBER.findall(content)}
                results.add(normal(content))
            continue
        answers = [m for m in messages[i + 1:] if m.get("role") == "tool"]
        for k, call in enumerate(message.get("tool_calls") or []):
            name, arguments = called(call)
            result = answers[k] if k < len(answers) else None
            if not arguments or result is None or result.get("failed", _is_error(result.get("content"))):
                continue
            new = normal(result.get("content") or "")
            key = (name, normal(json.dumps(arguments, sort_keys=True)))
            if key in counted or new in seen or new in results:
                continue
            if all(grounded(value) for value in arguments.values()):
                counted.add(key)
    return len(counted)
