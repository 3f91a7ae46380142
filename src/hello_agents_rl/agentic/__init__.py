"""Agentic RL: GRPO and SFT over multi-turn tool use, on TRL's own tool-calling machinery (docs/agentic.md).

`tools` (the registry of built-ins, user callables and import strings, each guarded), `environment`
(a stateful class for TRL's `environment_factory`), `template` (chat templates that can express tool
calls), `rewards` (trajectory rewards with safe shaping) and `evaluate` (batched evaluation with tools).
Nothing here imports torch or transformers at module level: the config layer validates through it.
"""
