"""The trajectory: what a rollout produced. A plain completion is a one-turn trajectory; a tool-using one is TRL's
list of messages (assistant turns with `tool_calls`, and the `tool` results TRL appended).
"""

from __future__ import annotations

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
        failed_calls=sum(_is_error(messages[i].get("content")) for i in tool_results),
        malformed_calls=sum(str(m.get("content") or "").count(TOOL_CALL_OPEN) for m in assistant),
        turns_exhausted=bool(assistant) and bool(assistant[-1].get("tool_calls")),
    )
