"""What a hello-agents agent sends, read from the agent itself, so that training sees exactly that.

hello-agents 1.0.x agents all call the model with native function calling: the messages of `agent._build_messages`
(its system prompt, then the question), the tool schemas of `agent._build_tool_schemas()`, and after each call a
tool message whose text is what the agent's own code makes of the tool's `ToolResponse` (1.0.0:
`_execute_tool_call`, plain text with error prefixes; 1.0.1: `_aexecute_tool_call`, `to_model_text()` through the
registry). `AgentSpec` reads those from the agent and runs tool calls through them, so the prompt, the schemas and
the tool messages of training are the agent's own. Nothing is re-derived: an agent that builds them differently
trains on what it builds. hello-agents is never imported here; the agent object is read by its methods.

ReActAgent's `Thought` and `Finish` are the agent's built-in tools (`_handle_builtin_tool`); a `Finish` call ends
the run and its `answer` is the run's answer (`AgentSpec.as_run`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hello_agents_rl.errors import ConfigError

# What an agent must have, and what training reads from it (a missing one is named in the ConfigError).
AGENT_NEEDS = {
    "run": "agent.run(question), the loop that will use the trained model",
    "tool_registry": "its ToolRegistry: training runs the tool calls through it",
    "_build_messages": "builds the messages it sends (system prompt, then the question)",
    "_build_tool_schemas": "builds the tool schemas it sends",
    "max_tool_iterations or max_steps": "its tool-turn limit",
    "_execute_tool_call or _aexecute_tool_call": "turns a tool call into the tool message it sends",
}
FINISH = "Finish"  # ReActAgent's built-in tool that ends a run; its `answer` is the run's answer
IMPLICIT = "hello-agents-rl tools"  # the name of the SimpleAgent made for hello-agents Tools given as `tools`
_recording = threading.local()  # the ToolResponses of the call running in this thread


def is_agent(obj: Any) -> bool:
    return hasattr(obj, "tool_registry") and hasattr(obj, "_build_tool_schemas")


def is_hello_agents_tool(obj: Any) -> bool:
    """A hello-agents `Tool` (or a `ToolRegistry` of them): read by shape, hello-agents is not imported."""
    return (hasattr(obj, "get_parameters") and hasattr(obj, "run_with_timing")) or is_registry(obj)


def is_registry(obj: Any) -> bool:
    return all(hasattr(obj, name) for name in ("get_all_tools", "execute_tool", "register_tool"))


def missing_parts(agent: Any) -> list[str]:
    """The entries of AGENT_NEEDS this object lacks."""
    return [need for need in AGENT_NEEDS if not any(hasattr(agent, part) for part in need.split(" or "))]


def check_agent(agent: Any, key: str = "agent") -> None:
    """ConfigError naming what a non-agent lacks, before anything loads."""
    missing = missing_parts(agent)
    if missing:
        raise ConfigError(
            f"`{key}`: {type(agent).__qualname__} is not a hello-agents agent: it has no "
            + "; no ".join(f"{m} ({AGENT_NEEDS[m]})" for m in missing)
            + ". Fix: give a hello-agents 1.x SimpleAgent or ReActAgent (or a subclass), e.g. "
            "SimpleAgent(name=..., llm=HelloAgentsLLM(...), tool_registry=registry)."
        )
    if agent.tool_registry is None or not agent._build_tool_schemas():
        raise ConfigError(f"`{key}`: the agent has no tools, so training would have nothing to call. Fix: give it a "
                          "ToolRegistry with at least one tool (tool_registry=... or agent.add_tool(tool)).")
    if getattr(agent, "context_builder", None) is not None:
        raise ConfigError(f"`{key}`: the agent has a context_builder, which rewrites its messages at every call; "
                          "training renders the messages of _build_messages only. Fix: train an agent without one.")
    if _tool_rounds(agent) < 1:
        limit = ("max_tool_iterations" if hasattr(agent, "max_tool_iterations") else "max_steps")
        raise ConfigError(f"`{key}`: the agent never calls a tool ({limit}={getattr(agent, limit)} leaves no tool "
                          f"round), so there is no tool use to train. Fix: raise {limit} (at least "
                          f"{1 if limit == 'max_tool_iterations' else 2}), or train without the agent.")
    history = getattr(agent, "_history", None) or []
    if len(history):
        raise ConfigError(f"`{key}`: the agent holds {len(history)} messages of history, which it would send before "
                          "every question; training renders each question as a fresh run. Fix: agent.clear_history().")


class AgentTool(dict):
    """One tool as the agent sends it: the dict is its schema (chat templates render a dict unchanged), calling
    it runs the call the agent's way, and `__name__` is the name TRL looks a call up by."""

    def __init__(self, schema: dict[str, Any], call: Callable[..., str]) -> None:
        super().__init__(schema)
        self.call = call
        self.__name__ = schema["function"]["name"]

    def __call__(self, **arguments: Any) -> str:
        return self.call(**arguments)

    def with_call(self, call: Callable[..., str]) -> AgentTool:
        return AgentTool(dict(self), call)


# hello-agents Config switches that register tools of its own (Skill, Task, TodoWrite, DevLog) in the agent's
# registry, and those that write files as it runs (traces, sessions); all off, the agent is its own tools alone
AGENT_EXTRA_TOOLS = ("skills_enabled", "subagent_enabled", "todowrite_enabled", "devlog_enabled")
AGENT_FILE_WRITERS = ("trace_enabled", "session_enabled")
AGENT_EXTRAS = AGENT_EXTRA_TOOLS + AGENT_FILE_WRITERS


@dataclass
class AgentSpec:
    agent: Any
    schemas: list[dict[str, Any]]
    max_tool_turns: int
    failed_texts: set[str] = field(default_factory=set)  # tool messages whose ToolResponse was an error
    stats: Any = None  # the run's ToolStats (rollouts/tool_guard.py): failed calls are counted there too
    recording: bool = False  # inside training(): every call's ToolResponse is seen

    @property
    def name(self) -> str:
        return f"{type(self.agent).__module__}.{type(self.agent).__qualname__}"

    @property
    def builtin(self) -> set[str]:
        return set(getattr(self.agent, "_builtin_tools", ()) or ())

    @property
    def extras_on(self) -> list[str]:
        """The agent's Config switches (AGENT_EXTRAS) that are on."""
        config = getattr(self.agent, "config", None)
        return [key for key in AGENT_EXTRAS if getattr(config, key, False) is True]

    def extras_warning(self) -> str | None:
        """What the switches that are on do to training, and the Config that turns them off."""
        on = self.extras_on
        if not on:
            return None
        tools, files = [k for k in on if k in AGENT_EXTRA_TOOLS], [k for k in on if k in AGENT_FILE_WRITERS]
        effects = ([f"{', '.join(tools)} register hello-agents' own tools beside yours, and training teaches them "
                    "too"] if tools else []) + ([f"{', '.join(files)} write files as the agent runs"] if files else [])
        return (f"the agent's Config has {'; '.join(effects)}; Config({', '.join(f'{k}=False' for k in on)}) keeps "
                "your tools alone")

    @property
    def implicit(self) -> bool:
        """Made for `tools`, not given: its tools are the user's, the prompts stay the dataset's."""
        return getattr(self.agent, "name", None) == IMPLICIT

    @property
    def finish_tool(self) -> str | None:
        return FINISH if FINISH in self.builtin else None

    @property
    def system_prompt(self) -> str | None:
        return next((m["content"] for m in self.prompt("") if m.get("role") == "system"), None)

    def prompt(self, question: str) -> list[dict[str, Any]]:
        """The messages the agent sends first for `question`."""
        return [dict(m) for m in self.agent._build_messages(question)]

    def tools(self) -> list[AgentTool]:
        """One callable schema per tool the agent offers, built-in tools included, in the agent's order."""
        return [AgentTool(schema, self._caller(schema["function"]["name"])) for schema in self.schemas]

    def _caller(self, name: str) -> Callable[..., str]:
        def call(**arguments: Any) -> str:
            return self.execute(name, arguments)

        call.__name__ = name
        return call

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool message the agent would send after calling `name` with `arguments` (its own code runs it)."""
        text, failed = self._run(name, arguments)
        if failed:
            self.failed_texts.add(text)
            if self.stats is not None:
                self.stats.failed(f"{name}: {text}"[:500])
        return text

    def _run(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        agent = self.agent
        if name in self.builtin:
            try:
                return agent._handle_builtin_tool(name, dict(arguments))["content"], False
            except (ValueError, TypeError) as error:  # the 1.0.1 loop's own handling of a refused built-in call
                return json.dumps({"status": "error", "text": str(error)}, ensure_ascii=False), True
        _recording.seen = []
        try:
            if hasattr(agent, "_aexecute_tool_call"):  # 1.0.1: the runtime awaits it
                text = asyncio.run(agent._aexecute_tool_call(name, dict(arguments)))
            else:
                text = agent._execute_tool_call(name, dict(arguments))
            responses = _recording.seen
        finally:
            _recording.seen = None
        if not responses:  # no ToolResponse: the agent could not call the tool (unknown name, bad arguments)
            return text, self.recording
        return text, getattr(getattr(responses[-1], "status", None), "value", None) == "error"

    def as_run(self, completion: Any) -> Any:
        """A trajectory as the agent's run reads it: a Finish call's answer becomes the final assistant message (the
        answer agent.run returns), and each tool message whose call failed is marked `failed`."""
        if not isinstance(completion, list):
            return completion
        messages = [dict(m, failed=True) if m.get("role") == "tool" and m.get("content") in self.failed_texts
                    else m for m in completion if isinstance(m, dict)]
        last = messages[-1] if messages else {}
        finish = next((c for c in last.get("tool_calls") or [] if _call_name(c) == self.finish_tool), None)
        if last.get("role") == "assistant" and finish is not None:
            arguments = (finish.get("function") or finish).get("arguments") or {}
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            messages.append({"role": "assistant", "content": str(arguments.get("answer", ""))})
        return messages

    @contextmanager
    def training(self) -> Iterator[None]:
        """While training: the registry's circuit breaker off (a failing call is a lesson, not an outage) and every
        ToolResponse recorded, so failures are counted from its status. Restored afterwards."""
        registry = self.agent.tool_registry
        breaker = getattr(registry, "circuit_breaker", None)
        was_enabled = getattr(breaker, "enabled", None)
        owners = [registry, *registry.get_all_tools()]
        patched = [(owner, attr, _record(owner, attr)) for owner in owners
                   for attr in ("execute_tool", "aexecute_tool", "run_with_timing") if hasattr(owner, attr)]
        if breaker is not None:
            breaker.enabled = False
        self.recording = True
        try:
            yield
        finally:
            self.recording = False
            if breaker is not None:
                breaker.enabled = was_enabled
            for owner, attr, earlier in patched:
                if earlier is None:
                    del owner.__dict__[attr]
                else:
                    owner.__dict__[attr] = earlier


def _record(owner: Any, attr: str) -> Any:
    """Wrap owner.attr (an instance attribute) so the ToolResponse it returns is recorded; returns what was there."""
    earlier = owner.__dict__.get(attr)
    method = getattr(owner, attr)

    def keep(response: Any) -> Any:
        seen = getattr(_recording, "seen", None)
        if seen is not None:
            seen.append(response)
        return response

    if asyncio.iscoroutinefunction(method):
        async def recorded(*args: Any, **kwargs: Any) -> Any:
            return keep(await method(*args, **kwargs))
    else:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            return keep(method(*args, **kwargs))

    owner.__dict__[attr] = recorded
    return earlier


def _call_name(call: Any) -> str | None:
    return (call.get("function") or call).get("name") if isinstance(call, dict) else None


def tool_turn_limit(agent: Any) -> int:
    """Tool rounds the agent allows before its last model call, as TRL's max_tool_calling_iterations counts them.

    1.0.1 (one loop, core/runtime.py) and 1.0.0's SimpleAgent: `max_tool_iterations` rounds, then one more call.
    1.0.0's ReActAgent: `max_steps` calls in all, so the results of its last round never reach the model.
    """
    return _tool_rounds(agent)


def _tool_rounds(agent: Any) -> int:
    if hasattr(agent, "max_tool_iterations"):
        return int(agent.max_tool_iterations)
    return int(agent.max_steps) - 1


def agent_spec(agent: Any, key: str = "agent") -> AgentSpec:
    check_agent(agent, key)
    return AgentSpec(agent, [dict(s) for s in agent._build_tool_schemas()], tool_turn_limit(agent))


def implicit_agent(tools: list[Any]) -> Any:
    """hello-agents Tools (or a ToolRegistry) given as `tools` without an agent: a SimpleAgent of the installed
    hello-agents over them, with its optional tools (skills, sub-agents, todo, devlog) and its files off, so the
    schemas and tool messages are what such an agent sends (the prompts stay the dataset's: `implicit`)."""
    from hello_agents import HelloAgentsLLM, SimpleAgent  # installed: the tools came from it
    from hello_agents.core.config import Config

    registries = [t for t in tools if is_registry(t)]
    registry = registries[0] if len(registries) == 1 and len(tools) == 1 else _registry_of(tools)
    off = {name: False for name in AGENT_EXTRAS if name in Config.model_fields}
    llm = HelloAgentsLLM(model="training", api_key="unused", base_url="http://127.0.0.1:9/v1")  # never called
    return SimpleAgent(name=IMPLICIT, llm=llm, config=Config(**off), tool_registry=registry)


def _registry_of(tools: list[Any]) -> Any:
    from hello_agents import ToolRegistry

    registry, seen = ToolRegistry(), dict[str, Any]()
    for tool in tools:
        for one in tool.get_all_tools() if is_registry(tool) else [tool]:
            if one.name in seen:  # the registry would keep the second alone
                raise ConfigError(f"`tools`: two tools are named {one.name!r} ({_described(seen[one.name])} and "
                                  f"{_described(one)}); a model calls a tool by its name. Fix: rename one")
            seen[one.name] = one
            registry.register_tool(one)
    return registry


def _described(tool: Any) -> str:
    return f"{type(tool).__module__}.{type(tool).__qualname__}"
