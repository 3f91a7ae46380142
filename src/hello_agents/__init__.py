"""hello-agents-rl: SFT and GRPO fine-tuning of small language models (Hello-Agents, section 11.4)."""

__version__ = "0.3.0"
