"""RLTrainingTool: a dict in, a dict of plain JSON values out. Nothing else lives here.

The book imports it as `from hello_agents.tools import RLTrainingTool` (hello_agents_rl.interfaces.book_import); with
hello-agents installed that name is a hello-agents `Tool` built on this class (hello_agents_rl.interfaces.hello_agents_tool).
"""

from __future__ import annotations

from typing import Any

from hello_agents_rl.interfaces.console import quiet_libraries
from hello_agents_rl.workflows import actions


class RLTrainingTool:
    """SFT and GRPO training, evaluation, datasets and rewards (Hello-Agents, section 11.4)."""

    name = "rl_training"
    description = "Fine-tune small language models with SFT and GRPO; evaluate them; inspect datasets and rewards."

    def run(self, params: dict[str, Any]) -> dict[str, Any]:
        quiet_libraries()  # as quiet as the command line where the output is a file or a pipe
        return actions.run(params)

    def get_parameters(self) -> list[dict[str, Any]]:
        """Every key of every action, in hello-agents' ToolParameter shape (generated from the config models)."""
        from hello_agents_rl.interfaces.schema import tool_parameters

        return tool_parameters()

    def json_schema(self, action: str = "train") -> dict[str, Any]:
        """One action's parameters as JSON Schema (hello_agents_rl.interfaces.schema)."""
        from hello_agents_rl.interfaces.schema import json_schema

        return json_schema(action)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Every action as an OpenAI function-calling tool; pass a call's arguments to run() with its action."""
        from hello_agents_rl.interfaces.schema import openai_tools

        return openai_tools()
