"""One prompt format for SFT, GRPO and evaluation: chat messages rendered by the model's template."""

from __future__ import annotations

import re
from typing import Any

GSM8K_SYSTEM_PROMPT = "Solve the math problem step by step. End with 'Final Answer: <number>'."
_CALCULATOR_ANNOTATION = re.compile(r"<<[^>]*>>")


def build_messages(question: str, system_prompt: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": question}]


def format_solution(answer: Any) -> str:
    """A reference answer as the completion SFT imitates, ending in the `Final Answer: N` we reward."""
    text = str(answer).strip()
    if "####" in text:  # GSM8K: "steps <<48/2=24>>24 ... #### 72"
        steps, _, final = text.rpartition("####")
        steps = _CALCULATOR_ANNOTATION.sub("", steps).strip()
        return f"{steps}\nFinal Answer: {final.strip()}".strip()
    if "final answer" in text.lower():
        return text
    return f"Final Answer: {text}"


def render_prompt(tokenizer: Any, messages: list[dict[str, str]], enable_thinking: bool = False) -> str:
    """The text the model continues; `enable_thinking` only matters to templates that read it (Qwen3)."""
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
