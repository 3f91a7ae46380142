"""`hello-agents-rl mcp`: the actions and the job calls over the Model Context Protocol (the official `mcp` SDK).

Tools: one per action, with the JSON Schema of hello_agents_rl.interfaces.schema; the actions the action table marks
as jobs (`train`, `pipeline`, `search`) start background jobs (hello_agents_rl.workflows.jobs) and return a job id
at once; `job_status`, `job_cancel`, `job_result` and `job_list` follow them. An agent is not the person who
started the server, so every path it names must lie under a `--root` folder, and code from elsewhere
(trust_remote_code, import strings for tools or environments) is refused unless the server was started with
`--trust-remote-code`. A bad argument comes back as a tool error naming the key; nothing a call does can stop
the server.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from hello_agents_rl.config.base import PathRole
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.interfaces.mcp_guard import Guard, markers
from hello_agents_rl.interfaces.mcp_http import HttpAccess, http_access
from hello_agents_rl.interfaces.schema import json_schema
from hello_agents_rl.workflows import actions
from hello_agents_rl.workflows.actions import ACTIONS, JOB_ACTIONS
from hello_agents_rl.workflows.jobs import JobManager

_JOB_ID = {"type": "object", "properties": {"job_id": {"type": "string", "description": "The id a job-starting tool returned."}},
           "required": ["job_id"], "additionalProperties": False}
JOB_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "job_status": ("A job's state (running, cancelling, completed, interrupted, failed, cancelled), step/total, "
                   "the latest reward/loss/KL, the training doctor's findings, the share of the job done "
                   "(fraction), the latest console line and an ETA in seconds.", _JOB_ID),
    "job_cancel": ("Stop a job as Ctrl-C does: it saves a checkpoint after the current step and ends 'interrupted' "
                   "(resume later with resume_from_checkpoint: true).", _JOB_ID),
    "job_result": ("The final result dict of a finished job (an error while it still runs).", _JOB_ID),
    "job_list": ("Every job this server's store knows, newest last, with its state.",
                 {"type": "object", "properties": {}, "additionalProperties": False}),
}
def _loads_a_model(name: str) -> bool:
    """An action run in place (not a job) whose config names a model: it loads one in this process."""
    action = ACTIONS[name]
    return action.job is None and any(isinstance(marker, PathRole) and marker.kind == "model"
                                      for key in action.config.model_fields for marker in markers(action.config, key))


# transformers' loading is not thread-safe (concurrent from_pretrained calls once left lm_head randomly
# initialised, or failed with "Cannot copy out of meta tensor"), and evaluation seeds torch's global RNG: such
# calls wait for each other, in arrival order, and give the numbers they give one at a time
IN_PLACE_MODEL_ACTIONS = tuple(name for name in ACTIONS if _loads_a_model(name))


class RLServer:
    """The MCP server around the actions and a job store."""

    def __init__(self, roots: list[str | Path], jobs_dir: str | Path | None = None,
                 trust_remote_code: bool = False, storage_schemes: tuple[str, ...] = ()) -> None:
        self.guard = Guard(roots, trust_remote_code, storage_schemes)
        self._model_lock = threading.Lock()  # see IN_PLACE_MODEL_ACTIONS
        self.jobs = JobManager(jobs_dir or self.guard.roots[0] / ".jobs", create=True)
        self.server = Server("hello-agents-rl", version=_version(), instructions=__doc__,
                             on_list_tools=self._list_tools, on_call_tool=self._call_tool,
                             get_tool_input_schema=self._input_schema)

    def tools(self) -> list[types.Tool]:
        listed = []
        for name in ACTIONS:
            schema = json_schema(name)
            description = schema["description"]
            if name in JOB_ACTIONS:
                description += " Runs as a background job: returns a job_id at once; follow it with job_status."
            listed.append(types.Tool(name=name, description=description,
                                     input_schema={k: v for k, v in schema.items() if k != "title"}))
        listed += [types.Tool(name=name, description=text, input_schema=schema) for name, (text, schema) in JOB_TOOLS.items()]
        return listed

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        return json_schema(name) if name in ACTIONS else JOB_TOOLS.get(name, (None, None))[1]

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools())

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:  # a worker thread: validation and quick actions must not stall other clients' calls
            result = await anyio.to_thread.run_sync(self.call, params.name, dict(params.arguments or {}))
        except ConfigError as error:
            return _error(str(error))
        except Exception as error:  # noqa: BLE001 - an action's own failure: reported to the agent, the server lives on
            return _error(f"{type(error).__name__}: {error}")
        result = _plain(result)
        text = json.dumps(result, ensure_ascii=False, indent=1)
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=result if isinstance(result, dict) else {"items": result})

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """One tool call, synchronously (also usable without MCP, e.g. in tests)."""
        if name in JOB_TOOLS:
            if name == "job_list":
                return {"jobs": self.jobs.list()}
            job_id = arguments.get("job_id")
            if not isinstance(job_id, str) or set(arguments) != {"job_id"}:
                raise ConfigError(f"`job_id`: {name} takes exactly one argument, job_id (a string)")
            return {"job_status": self.jobs.status, "job_cancel": self.jobs.cancel,
                    "job_result": self.jobs.result}[name](job_id)
        if name not in ACTIONS:
            raise ConfigError(f"unknown tool {name!r}; tools: {', '.join([*ACTIONS, *JOB_TOOLS])}")
        if arguments.get("action", name) != name:
            raise ConfigError(f"`action`: the tool is {name!r} but action says {arguments['action']!r}; drop the key")
        params = {**arguments, "action": name}
        self.guard.check(params)  # the keys as given, before validation touches the disk
        cfg = actions.parse(params)
        self.guard.check(cfg.model_dump())  # defaults too (./models/<algorithm>_model must also lie under a root)
        if name in JOB_ACTIONS:
            return self.jobs.start(params)
        if name in IN_PLACE_MODEL_ACTIONS:
            with self._model_lock:
                return ACTIONS[name].run(cfg)
        return ACTIONS[name].run(cfg)

    async def run_stdio(self) -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    async def run_http(self, access: HttpAccess, port: int = 8000) -> None:
        import uvicorn

        app = self.server.streamable_http_app(**access.app_options())  # the SDK's Streamable HTTP app, at /mcp
        await uvicorn.Server(uvicorn.Config(app, host=access.host, port=port, log_level="warning")).serve()


def serve(roots: list[str], jobs_dir: str | None = None, trust_remote_code: bool = False,
          http: bool = False, host: str = "127.0.0.1", port: int = 8000, allow_remote: bool = False,
          token_file: str | None = None, allowed_hosts: list[str] | None = None,
          storage_schemes: tuple[str, ...] = ()) -> None:
    access = http_access(host, allow_remote, token_file, allowed_hosts) if http else None  # refused before binding
    server = RLServer(roots, jobs_dir, trust_remote_code, storage_schemes)  # refuses a missing --root first too
    if access is None:
        anyio.run(server.run_stdio)
        return
    if access.token is not None:
        print(f"hello-agents-rl mcp: serving http://{host}:{port}/mcp to remote clients; every request needs "
              "`Authorization: Bearer <token>`", file=sys.stderr)
    anyio.run(server.run_http, access, port)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"error: {message}")], is_error=True)


def _plain(value: Any) -> Any:
    """JSON has no NaN or inf: show them as strings rather than break the client's parser."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hello-agents-rl")
    except PackageNotFoundError:
        return "0"
