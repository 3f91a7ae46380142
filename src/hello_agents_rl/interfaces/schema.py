"""Every action's parameters as JSON Schema, generated from the config models (the one source of truth).

`json_schema(action)` is a plain JSON Schema (draft 2020-12) object; `openai_tools()` wraps one per action as
an OpenAI function-calling tool; the MCP server lists the same schemas. Keys typed `Any` in Python (a
datasets.Dataset, a reward callable, a tool function) take their JSON form here: a name or an import string.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards import REWARD_NAMES
from hello_agents_rl.rollouts.tool_registry import BUILTIN_TOOLS
from hello_agents_rl.tasks import BUILT_IN
from hello_agents_rl.workflows.actions import ACTIONS

# What a JSON caller can give for the keys that Python callers may also fill with objects.
_JSON_FORMS: dict[str, dict[str, Any]] = {
    "dataset": {"type": "string", "examples": [*BUILT_IN, "reasoning_gym:leg_counting", "my_tasks:MyTask", "data/train.jsonl"]},
    "reward_type": {"type": "string", "enum": list(REWARD_NAMES)},
    "environment": {"anyOf": [{"type": "string"}, {"type": "null"}], "examples": ["mypkg.envs:Shop"]},
    "tools": {"type": "array", "items": {"type": "string"}, "examples": [list(BUILTIN_TOOLS)]},
    "agent": {"type": "null"},  # a hello-agents agent object: Python callers only
}


def json_schema(action: str) -> dict[str, Any]:
    """JSON Schema of one action's parameters: types, enums, bounds, defaults, descriptions, required keys."""
    if action not in ACTIONS:
        raise ConfigError(f"`action`: unknown action {action!r}; use one of: {', '.join(ACTIONS)}")
    model = ACTIONS[action].config
    schema = model.model_json_schema()
    properties: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        prop = _strip_titles(schema["properties"][name])
        if name in _JSON_FORMS:
            prop = {**_JSON_FORMS[name], "description": prop.get("description", "")}
        prop = _plain_arrays(prop)
        if name == "action":
            prop = {"const": action, "description": f"Always {action!r} (optional: the tool name says it)."}
        elif not field.is_required():
            default = field.default_factory() if field.default_factory else field.default
            if _is_json(default):
                prop["default"] = default
        properties[name] = prop
    out: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "title": action,
        "description": " ".join((model.__doc__ or action).split()),
        "properties": properties,
        "additionalProperties": False,  # the config models forbid unknown keys: a typo is an error, not ignored
    }
    if schema.get("required"):
        out["required"] = list(schema["required"])
    return out


def openai_tools(actions: list[str] | None = None) -> list[dict[str, Any]]:
    """OpenAI function-calling tools (`tools=` of chat.completions.create), one per action."""
    tools = []
    for name in actions or list(ACTIONS):
        schema = json_schema(name)
        parameters = {k: v for k, v in schema.items() if k not in ("$schema", "title", "description")}
        tools.append({"type": "function",
                      "function": {"name": name, "description": schema["description"], "parameters": parameters}})
    return tools


def tool_parameters() -> list[dict[str, Any]]:
    """One flat list over every action, in hello-agents' `ToolParameter` shape (name, type, description, required,
    default): its registry and agents describe a tool by one list, and `action` picks which keys apply."""
    params: dict[str, dict[str, Any]] = {"action": {
        "name": "action", "type": "string", "required": True, "default": "train",
        "description": f"What to do: one of {', '.join(ACTIONS)}. Each other key says which actions read it.",
    }}
    for action in ACTIONS:
        for key, prop in json_schema(action)["properties"].items():
            if key == "action":
                continue
            entry = params.setdefault(key, {
                "name": key, "type": _simple_type(prop), "required": False, "default": prop.get("default"),
                "description": prop.get("description", ""), "actions": [],
            })
            entry["actions"].append(action)
    for entry in params.values():
        if "actions" in entry:
            entry["description"] = f"{entry['description']} (actions: {', '.join(entry.pop('actions'))})".strip()
    return list(params.values())


def _simple_type(prop: dict[str, Any]) -> str:
    """A JSON Schema property's main type as one word (hello-agents converts arguments by it)."""
    if isinstance(prop.get("type"), str):
        return prop["type"]
    for option in prop.get("anyOf", []):
        if option.get("type") not in (None, "null"):
            return _simple_type(option)
    return "string"


def _strip_titles(node: Any) -> Any:
    """pydantic's "title": "Max Samples" repeats the key; clients show the description instead."""
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _plain_arrays(node: Any) -> Any:
    """Fixed-length tuples (kl_target) as `items` + min/maxItems: OpenAI tool schemas reject prefixItems."""
    if isinstance(node, list):
        return [_plain_arrays(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _plain_arrays(v) for k, v in node.items()}
    if "prefixItems" in node:
        items = node.pop("prefixItems")
        node["items"] = items[0] if all(i == items[0] for i in items) else {"anyOf": copy.deepcopy(items)}
    return node


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
