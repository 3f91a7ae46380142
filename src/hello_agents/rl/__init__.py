"""The engine behind RLTrainingTool: config -> data, rewards, models -> TRL trainers -> results."""

from hello_agents.rl.errors import ConfigError

__all__ = ["ConfigError"]
