"""`transformers serve`, unchanged except that it refuses what it would otherwise ignore without a word.

transformers serve (5.24) always lets the model choose whether to call a tool: it accepts `tool_choice` and
ignores it (a warning in the server's log only). "auto", what hello-agents agents send, is what it does anyway;
"none", "required" or a named function would be a silent change of what the client asked for, so those requests
get a 400 naming the field. Run as `python -m hello_agents_rl.workflows.transformers_serve serve MODEL ...`, the
arguments of `transformers serve`.
"""

from __future__ import annotations

import sys
from typing import Any

HONOURED_TOOL_CHOICES = (None, "auto")


def tool_choice_problem(body: dict[str, Any]) -> str | None:
    """Why this chat request cannot be served as asked, or None."""
    choice = body.get("tool_choice")
    if choice in HONOURED_TOOL_CHOICES:
        return None
    return (f"tool_choice {choice!r} is not supported by this server (transformers serve): the model always chooses "
            "whether to call a tool, as with 'auto'. Send tool_choice 'auto' or leave it out; to force a call or "
            "no call, use an engine that honours tool_choice (hello-agents-rl serve --engine vllm).")


def refuse_unhonoured_tool_choice() -> None:
    from fastapi import HTTPException
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    validate = ChatCompletionHandler._validate_request

    def checked(self: Any, body: dict) -> None:
        problem = tool_choice_problem(body)
        if problem:
            raise HTTPException(status_code=400, detail=problem)
        validate(self, body)

    ChatCompletionHandler._validate_request = checked


def main() -> None:
    refuse_unhonoured_tool_choice()
    from transformers.cli.transformers import main as transformers_cli

    sys.argv = ["transformers", *sys.argv[1:]]
    sys.exit(transformers_cli())


if __name__ == "__main__":
    main()
