"""The agent-facing tools: `from hello_agents.tools import RLTrainingTool`."""

from hello_agents.tools.rl_training import RLTrainingTool

__all__ = ["RLTrainingTool"]
