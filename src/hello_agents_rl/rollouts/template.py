"""Chat templates that can express tool calls, and the check that a model's template can.

TRL renders the tools into the prompt with the model's chat template, parses each completion back into
messages with the tokenizer's `response_template` (tool calls included), and appends tool results by
rendering them with the same template. So a tool run needs a template that (1) renders assistant
`tool_calls` and `tool` messages, (2) renders a prefix the same whatever follows, and (3) a response
parser: known templates (Qwen2.5/Qwen3, Llama 3.1/3.2, GLM-4, GPT-OSS, Gemma 4, ...) get TRL's; a
tokenizer may also carry its own `response_template`. `TOOL_CHAT_TEMPLATE` is ChatML with Qwen-style
`<tool_call>{json}</tool_call>` and `{% generation %}` markers (SFT on the assistant's tokens only).
"""

from __future__ import annotations

from typing import Any

from hello_agents_rl.errors import ConfigError

# The system line lists the tools: by name with their parameters, "Tools: calculator(expression).", since a model
# cannot guess an argument's name (SmolLM2 wrote `args`, and its calls failed); the tiny model's by name alone, the
# line its demos' seeds were measured with (a 1M-parameter model learns the copy from scratch).
TOOLS_WITH_PARAMETERS = ("{% if tools %}Tools:{% for tool in tools %}{% set f = tool.function or tool %} {{ f.name }}("
                         "{{ ((f.parameters or {}).properties or {}) | join(', ') }}){% endfor %}. ")
TOOLS_BY_NAME = "{% if tools %}Tools:{% for tool in tools %} {{ (tool.function or tool).name }}{% endfor %}. "


def tool_chat_template(tools_line: str = TOOLS_WITH_PARAMETERS) -> str:
    """ChatML with tool calls; `tools_line` renders the tools into the system message."""
    return (  # transformers renders with trim_blocks: a newline right after a tag is written as {{ '\n' }}
        "{% if tools or messages[0]['role'] == 'system' %}<|im_start|>system{{ '\\n' }}"
        "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% if tools %}{{ '\\n' }}{% endif %}"
        "{% endif %}" + tools_line +
        "Call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>{% endif %}<|im_end|>{{ '\\n' }}"
        "{% endif %}" + _MESSAGES)


_MESSAGES = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}<|im_start|>assistant{{ '\\n' }}{% generation %}"
    "{{ message['content'] or '' }}"
    "{% for call in message['tool_calls'] or [] %}{% set f = call.function or call %}"
    "<tool_call>{{ '\\n' }}{\"name\": \"{{ f.name }}\", \"arguments\": "
    "{{ f.arguments if f.arguments is string else f.arguments | tojson }}}{{ '\\n' }}</tool_call>{% endfor %}"
    "<|im_end|>{% endgeneration %}{{ '\\n' }}"
    "{% elif message['role'] == 'tool' %}<|im_start|>user{{ '\\n' }}<tool_response>{{ '\\n' }}{{ message['content'] }}"
    "{{ '\\n' }}</tool_response><|im_end|>{{ '\\n' }}"
    "{% elif not (loop.first and message['role'] == 'system') %}"
    "<|im_start|>{{ message['role'] }}{{ '\\n' }}{{ message['content'] }}<|im_end|>{{ '\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)
TOOL_CHAT_TEMPLATE = tool_chat_template()  # what add_tool_template gives a ChatML model (SmolLM2)
TINY_TOOL_CHAT_TEMPLATE = tool_chat_template(TOOLS_BY_NAME)  # the tiny tool model's

# What TRL's parser reads back: the same shape as its own Qwen3 response template (no <think>).
TOOL_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}

WORKING_TEMPLATES = (
    "Qwen2.5, Qwen3 (and -VL, -Instruct-2507), Qwen3.5/3.6, Llama 3.1/3.2, GLM-4-MoE, GPT-OSS, Gemma 4, "
    "LFM2.5, Nemotron 3, DeepSeek-R1-Distill, and the tiny model of `hello-agents-rl tiny-model --tools`"
)


def template_problem(tokenizer: Any) -> str | None:
    """Why TRL could not run tools with this tokenizer's chat template, or None when it can."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        return "its chat template cannot render a tool-calling conversation (assistant tool_calls, then a tool message)"
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            return "TRL has no parser for tool calls written in its chat template (no response_template)"
    return None


def check_tool_template(tokenizer: Any, model_name: str, key: str = "tools") -> None:
    """ConfigError before the model loads when TRL could not parse or render this model's tool calls."""
    problem = template_problem(tokenizer)
    if problem:
        raise ConfigError(
            f"`{key}`: model {model_name!r} cannot be trained or evaluated with tools: {problem}. Templates that "
            f"work: {WORKING_TEMPLATES}. Fix: start from such a model, or set tokenizer.chat_template to one that "
            "renders tool calls and tokenizer.response_template to its parser, save the tokenizer with the model "
            "(hello_agents_rl.rollouts.template.add_tool_template does this for ChatML models)."
        )


def add_tool_template(tokenizer: Any) -> Any:
    """Give a ChatML tokenizer the tool-capable template and its parser (saved with save_pretrained)."""
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = TOOL_RESPONSE_TEMPLATE
    return tokenizer
