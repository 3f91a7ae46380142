"""Public: `hello_agents_rl.schema.json_schema(action)`; the schema lives in `interfaces/schema.py`."""

from hello_agents_rl.interfaces.schema import json_schema, openai_tools, tool_parameters

__all__ = ["json_schema", "openai_tools", "tool_parameters"]
