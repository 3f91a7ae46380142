"""hello-agents-rl: SFT and GRPO fine-tuning of small language models (Hello-Agents, section 11.4).

The engine behind RLTrainingTool: config -> data, rewards, models -> TRL trainers -> results. Kept light: Python
imports this package at every start-up (hello_agents_rl.pth -> book_import).
"""

__version__ = "0.4.0"

from hello_agents_rl.errors import ConfigError

__all__ = ["ConfigError", "__version__"]
