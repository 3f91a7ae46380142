"""`transformers serve`, with two changes to how it reads a request and one to how it answers.

- It serves one model, so any `model` name in a request gets that model, on every endpoint (chat completions,
  completions, responses): the reader's agent is written `HelloAgentsLLM(model="m", base_url=...)`, and a server
  pinned to a folder path would answer any other name with a 400 that hello-agents swallows (the agent's answer
  is then empty).
- It refuses what it would otherwise ignore without a word: transformers serve (5.24) always lets the model
  choose whether to call a tool, accepting `tool_choice` and ignoring it (a warning in the server's log only).
  "auto", what hello-agents agents send, is what it does anyway; "none", "required" or a named function would be
  a silent change of what the client asked for, so those requests get a 400 naming the field.
- A reply whose tool call `max_tokens` cut short is answered as its text, with finish_reason "length": transformers
  (5.24) fails to parse it and answers 500, which ends an agent's whole run (hello-agents raises), where a cut
  reply is one wrong step.

Run as `python -m hello_agents_rl.workflows.transformers_serve serve MODEL ...`, the arguments of
`transformers serve`.
"""

from __future__ import annotations

import inspect
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


def _replaceable(owner: str, name: str, module: str = "transformers.cli.serving.chat_completion") -> None:
    """Stop the server where transformers' `module` no longer has `owner.name` as coupling.py expects."""
    from hello_agents_rl.coupling import replaced_blocker

    problem = replaced_blocker(module, owner, name)
    if problem:
        raise SystemExit(f"hello-agents-rl serve: {problem}; use the transformers version in requirements.lock, or "
                         "--engine vllm")


def read_requests_as_served() -> None:
    """ChatCompletionHandler._validate_request (coupling.py checks its signature): the tool_choice check, then
    transformers' own."""
    from fastapi import HTTPException
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    _replaceable("ChatCompletionHandler", "_validate_request")
    validate = ChatCompletionHandler._validate_request

    def checked(self: Any, body: dict) -> None:
        problem = tool_choice_problem(body)
        if problem:
            raise HTTPException(status_code=400, detail=problem)
        validate(self, body)

    ChatCompletionHandler._validate_request = checked


def serve_any_model_name() -> None:
    """BaseHandler._resolve_model, where every endpoint reads the request's model (coupling.py checks its signature):
    the one model served, whatever name the client sent."""
    from transformers.cli.serving.utils import BaseHandler

    _replaceable("BaseHandler", "_resolve_model", "transformers.cli.serving.utils")
    resolve = BaseHandler._resolve_model

    def pinned(self: Any, body: dict) -> Any:
        if self.model_manager.force_model is not None:
            body["model"] = self.model_manager.force_model
        return resolve(self, body)

    BaseHandler._resolve_model = pinned  # type: ignore[method-assign]


def answer_cut_tool_calls_as_text() -> None:
    """chat_completion.parse_assistant_message (coupling.py checks its signature): what fails to parse is the text."""
    from transformers.cli.serving import chat_completion

    _replaceable("", "parse_assistant_message")
    parse = chat_completion.parse_assistant_message

    def tolerant(*args: Any, **kwargs: Any) -> Any:  # transformers added `tools` in 5.2x: pass through what is given
        try:
            return parse(*args, **kwargs)
        except ValueError:  # transformers' response parser: a tool call's JSON cut off
            return inspect.signature(parse).bind(*args, **kwargs).arguments.get("cleaned_content", ""), None, None

    chat_completion.parse_assistant_message = tolerant


def main() -> None:
    read_requests_as_served()
    serve_any_model_name()
    answer_cut_tool_calls_as_text()
    from transformers.cli.transformers import main as transformers_cli

    sys.argv = ["transformers", *sys.argv[1:]]
    sys.exit(transformers_cli())


if __name__ == "__main__":
    main()
