"""RLTrainingTool: a dict in, a dict of plain JSON values out. Nothing else lives here."""

from __future__ import annotations

from typing import Any

from hello_agents.rl import actions
from hello_agents.rl.config import describe_fields


class RLTrainingTool:
    """SFT and GRPO training, evaluation, datasets and rewards (Hello-Agents, section 11.4)."""

    name = "rl_training"
    description = "Fine-tune small language models with SFT and GRPO; evaluate them; inspect datasets and rewards."

    def run(self, params: dict[str, Any]) -> dict[str, Any]:
        return actions.run(params)

    def get_parameters(self) -> dict[str, list[dict[str, str]]]:
        """The parameter schema per action, generated from the config models."""
        return {
            name: [{"name": n, "default": d, "description": text} for n, d, text in describe_fields(action.config)]
            for name, action in actions.ACTIONS.items()
        }

    def json_schema(self, action: str = "train") -> dict[str, Any]:
        """One action's parameters as JSON Schema (hello_agents.rl.schema)."""
        from hello_agents.rl.schema import json_schema

        return json_schema(action)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Every action as an OpenAI function-calling tool; pass a call's arguments to run() with its action."""
        from hello_agents.rl.schema import openai_tools

        return openai_tools()
