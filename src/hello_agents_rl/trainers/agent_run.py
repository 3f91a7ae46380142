"""What training a hello-agents agent adds to a tool run (docs/agentic.md, "Training the agent itself").

The agent (`agent` key) is read once into an `AgentSpec` (rollouts/agent_spec.py): every prompt becomes the messages
the agent sends for its question, TRL renders the agent's own tool schemas, each tool call runs through the
agent's own code and registry (circuit breaker off while training), and the trajectory is read as the agent's run
reads it. A ReActAgent's `Finish` call ends the rollout: TRL's tool loop drops a tool result that would not fit the
completion budget and ends that rollout there, so the result of `Finish` is reported as one that does not fit.
"""

from __future__ import annotations

from typing import Any

from hello_agents_rl.rollouts.agent_spec import AgentSpec, agent_spec


def spec_of(cfg: Any) -> AgentSpec | None:
    agent = getattr(cfg, "agent", None)
    return agent_spec(agent) if agent is not None else None


def with_agent_prompts(rows: Any, spec: AgentSpec) -> Any:
    """Each row's prompt as the agent sends it: its messages for the row's question (the last user message)."""

    def agent_prompt(row: dict[str, Any]) -> dict[str, Any]:
        question = next(m["content"] for m in reversed(row["prompt"]) if m.get("role") == "user")
        return {"prompt": spec.prompt(question)}

    return rows.map(agent_prompt)


def trainer_class(base: type, spec: AgentSpec) -> type:
    """`base` (a GRPOTrainer) whose rollouts end at the agent's Finish call, as agent.run does."""
    finish = spec.finish_tool
    if finish is None:
        return base
    if not hasattr(base, "_get_tool_suffix_ids"):  # TRL's loop changed: Finish would not end the rollout
        raise RuntimeError("this TRL has no GRPOTrainer._get_tool_suffix_ids: a ReActAgent's Finish cannot end its "
                           "rollouts; use the TRL version in requirements.lock")

    class AgentGRPOTrainer(base):  # type: ignore[misc, valid-type]
        def _get_tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
            if any(m.get("name") == finish for m in tool_messages):
                # longer than the completion budget: TRL rolls this round's tool messages back and ends the
                # rollout on the Finish call, whose tokens are the last ones trained on
                return [self._tokenizer.pad_token_id or 0] * (self.max_completion_length + 1)
            return super()._get_tool_suffix_ids(tool_messages)

    AgentGRPOTrainer.__name__ = AgentGRPOTrainer.__qualname__ = base.__name__
    return AgentGRPOTrainer


def summary(spec: AgentSpec) -> dict[str, Any]:
    """What results.json and prompt_settings.json say of the agent trained."""
    return {"class": spec.name, "tools": [s["function"]["name"] for s in spec.schemas],
            "max_tool_turns": spec.max_tool_turns, "finish_tool": spec.finish_tool}
