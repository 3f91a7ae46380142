"""What training a hello-agents agent adds to a tool run (docs/agentic.md, "Training the agent itself").

The agent (`agent` key) is read once into an `AgentSpec` (rollouts/agent_spec.py): every prompt becomes the messages
the agent sends for its question, TRL renders the agent's own tool schemas, each tool call runs through the
agent's own code and registry (circuit breaker off while training), and the trajectory is read as the agent's run
reads it. A ReActAgent's `Finish` call ends the rollout: TRL's tool loop drops a tool result that would not fit the
completion budget and ends that rollout there, so the result of `Finish` is reported as one that does not fit.
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from hello_agents_rl.coupling import replaced_blocker
from hello_agents_rl.rollouts.agent_spec import AgentSpec, agent_spec

TrlGRPOTrainer: Any = GRPOTrainer  # typed loosely: TRL's attributes are Optional until its __init__ sets them


def spec_of(cfg: Any) -> AgentSpec | None:
    agent = getattr(cfg, "agent", None)
    return agent_spec(agent) if agent is not None else None


def with_agent_prompts(rows: Any, spec: AgentSpec) -> Any:
    """Each row's prompt as the agent sends it: its messages for the row's question (the last user message)."""

    def agent_prompt(row: dict[str, Any]) -> dict[str, Any]:
        question = next(m["content"] for m in reversed(row["prompt"]) if m.get("role") == "user")
        return {"prompt": spec.prompt(question)}

    return rows.map(agent_prompt)


class FinishEndsTheRollout(TrlGRPOTrainer):
    """GRPO whose rollouts end at the agent's `finish_tool` call (a ReActAgent's Finish), as agent.run does;
    composed over the run's trainer in trainers/build.py, with `finish_tool` set there."""

    finish_tool: str = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        problem = replaced_blocker("trl", "GRPOTrainer", "_get_tool_suffix_ids")
        if problem:  # TRL's loop changed: Finish would not end the rollout
            raise RuntimeError(f"{problem}: a ReActAgent's Finish cannot end its rollouts; use the TRL version in "
                               "requirements.lock")
        super().__init__(*args, **kwargs)

    def _get_tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
        if any(m.get("name") == self.finish_tool for m in tool_messages):
            # longer than the completion budget: TRL rolls this round's tool messages back and ends the
            # rollout on the Finish call, whose tokens are the last ones trained on
            return [self._tokenizer.pad_token_id or 0] * (self.max_completion_length + 1)
        return super()._get_tool_suffix_ids(tool_messages)


def summary(spec: AgentSpec) -> dict[str, Any]:
    """What results.json and prompt_settings.json say of the agent trained."""
    return {"class": spec.name, "tools": [s["function"]["name"] for s in spec.schemas],
            "max_tool_turns": spec.max_tool_turns, "finish_tool": spec.finish_tool}


def mismatch(recorded: dict[str, Any] | None, prompt: dict[str, Any]) -> str | None:
    """What the agent sends that the starting model was not trained with (its tools, its system prompt), where the
    starting model recorded an agent: a model trained on one calculator, prompted with five tools, stays at reward 0."""
    recorded = recorded or {}
    before, now = recorded.get("agent"), prompt.get("agent")
    if not before or not now:
        return None
    differences = []
    added, dropped = sorted(set(now["tools"]) - set(before["tools"])), sorted(set(before["tools"]) - set(now["tools"]))
    if added or dropped:
        differences.append(f"tools {before['tools']} then, {now['tools']} now"
                           + (f" (new: {', '.join(added)})" if added else "")
                           + (f" (gone: {', '.join(dropped)})" if dropped else ""))
    if recorded.get("system_prompt") != prompt.get("system_prompt"):
        differences.append(f"system prompt {str(recorded.get('system_prompt'))[:80]!r} then, "
                           f"{str(prompt.get('system_prompt'))[:80]!r} now")
    if not differences:
        return None
    return ("the starting model was trained with another agent setup: " + "; ".join(differences)
            + ". Give the agent the tools and system prompt it was trained with (hello-agents' Config turns its "
            "extra tools off: docs/agentic.md), or expect a reward near 0 at first")
