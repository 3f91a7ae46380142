"""RLTrainingTool as a real hello-agents `Tool`, for whichever hello-agents is installed (0.2.x or 1.x).

`run(dict) -> dict` stays as the book shows. What hello-agents' registry and agents call gets what they expect:
- 0.2.x: `ToolRegistry.execute_tool(name, text)` calls `run({"input": text})` and wants a str: the result (or the
  error) as JSON text.
- 1.x: the registry and agents call `run_with_timing` / `arun_with_timing` and want a `ToolResponse`; a bad key is
  INVALID_PARAM naming it, a failed run EXECUTION_ERROR, an interrupted one PARTIAL, each with the result's JSON.
Parameters come as `ToolParameter`s (schema.tool_parameters), so hello-agents converts argument types by them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from types import ModuleType
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.interfaces.tool import RLTrainingTool as PlainTool

REGISTRY_TEXT_KEY = "input"  # hello-agents wraps a tool call's raw text as {"input": text}


def book_tool_class(tools: ModuleType) -> type:
    """The class behind `hello_agents.tools.RLTrainingTool`: a Tool subclass when hello-agents is installed."""
    if not isinstance(getattr(tools, "Tool", None), type):
        return PlainTool  # the stand-in module: hello-agents is not installed
    return _tool_class(tools)


@functools.cache
def _tool_class(tools: ModuleType) -> type:
    tool_base, parameter = tools.Tool, tools.ToolParameter
    response = getattr(tools, "ToolResponse", None)  # 1.x only

    class RLTrainingTool(PlainTool, tool_base):  # type: ignore[misc, valid-type]
        __doc__ = PlainTool.__doc__

        def __init__(self) -> None:
            tool_base.__init__(self, PlainTool.name, PlainTool.description)

        def run(self, parameters: dict[str, Any]) -> Any:
            if response is None and _is_registry_text(parameters):  # 0.2.x registry: text in, text out
                return _as_text(lambda: PlainTool.run(self, _parse_text(parameters[REGISTRY_TEXT_KEY])))
            return PlainTool.run(self, parameters)

        def get_parameters(self) -> list[Any]:
            return [parameter(**p) for p in PlainTool.get_parameters(self)]

        if response is not None:

            def run_with_timing(self, parameters: dict[str, Any]) -> Any:
                start = time.perf_counter()
                out = _respond(tools, lambda: PlainTool.run(self, _from_registry(parameters)))
                out.stats = {**(out.stats or {}), "time_ms": int((time.perf_counter() - start) * 1000)}
                out.context = {**(out.context or {}), "params_input": parameters, "tool_name": self.name}
                return out

            async def arun(self, parameters: dict[str, Any]) -> Any:
                return await asyncio.get_running_loop().run_in_executor(
                    None, lambda: _respond(tools, lambda: PlainTool.run(self, _from_registry(parameters))))

    RLTrainingTool.__module__ = tools.__name__
    return RLTrainingTool


def _is_registry_text(parameters: Any) -> bool:
    return isinstance(parameters, dict) and list(parameters) == [REGISTRY_TEXT_KEY] and isinstance(
        parameters[REGISTRY_TEXT_KEY], str)


def _from_registry(parameters: dict[str, Any]) -> dict[str, Any]:
    return _parse_text(parameters[REGISTRY_TEXT_KEY]) if _is_registry_text(parameters) else parameters


def _parse_text(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigError(
            f"`{REGISTRY_TEXT_KEY}`: rl_training takes its parameters as one JSON object, e.g. "
            '{"action": "evaluate", "model_path": "./models/grpo_model"}; got ' + repr(text[:80])
        )
    return parsed


def _as_text(call: Any) -> str:
    try:
        result = call()
    except ConfigError as error:
        result = {"status": "error", "message": str(error)}
    return json.dumps(result, ensure_ascii=False)


def _respond(tools: ModuleType, call: Any) -> Any:
    response, codes = tools.ToolResponse, tools.ToolErrorCode
    try:
        result = call()
    except ConfigError as error:
        return response.error(code=codes.INVALID_PARAM, message=str(error))
    except Exception as error:  # noqa: BLE001 - a tool answers its agent; the agent decides what to do next
        return response.error(code=codes.EXECUTION_ERROR, message=f"{type(error).__name__}: {error}")
    text = json.dumps(result, ensure_ascii=False)
    status = result.get("status")
    if status == "failed":
        out = response.error(code=codes.EXECUTION_ERROR, message=text)
        out.data = result
        return out
    if status == "interrupted":
        return response.partial(text=text, data=result)
    return response.success(text=text, data=result)
