"""`hello-agents-rl serve MODEL`: a trained model behind an OpenAI-compatible API, on an existing engine.

vLLM (`vllm serve`) on a CUDA GPU when it is installed, else transformers' own `transformers serve` (with one
check of ours in front: a `tool_choice` it cannot honour is refused, workflows/transformers_serve.py). 8-bit
loading (the book's deployment step) is bitsandbytes' LLM.int8 through `transformers serve --quantization bnb-8bit`,
on a CUDA GPU only: elsewhere it is refused before anything loads. Nothing
here answers a request: this module only finds the folder an engine can load (a run's output_dir means its
model/; a LoRA adapter is merged first by the export action) and starts the engine on it.

A merge goes to the cache, $HELLO_AGENTS_CACHE/merged (default ~/.cache/hello_agents_rl/merged), never into the
run: a run's folder is the user's record and export refuses to write inside it. The merge is keyed by the
adapter's path and files, so serving the same adapter again reuses it and a retrained one is merged anew. It
outlives the process on purpose: the engine replaces this process (exec), so nothing is left to clean up after
it, and the next serve starts at once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hello_agents_rl import children
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.models import gguf_cache_dir, is_adapter_dir, resolve_model_source

ENGINES = ("auto", "vllm", "transformers")


@dataclass
class ServePlan:
    model: str  # the folder the engine loads
    engine: str
    command: list[str]
    base_url: str
    notes: list[str] = field(default_factory=list)


def model_folder(model: str, merged_dir: str | None = None) -> tuple[str, list[str]]:
    """The plain transformers folder behind `model` (run folder, model/, adapter/); adapters merged via export."""
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(f"`model`: {model} does not exist; give a run's output_dir, its model/ or adapter/ folder")
    source = Path(resolve_model_source(str(path)))
    if (source / "config.json").is_file():
        return str(source.resolve()), []
    if not is_adapter_dir(source):
        raise ConfigError(f"`model`: {source} holds neither a model (config.json) nor a LoRA adapter; "
                          "give a run's output_dir, its model/ or adapter/ folder")
    from hello_agents_rl.workflows.export import MANIFEST, export

    out = Path(merged_dir).expanduser() if merged_dir else merge_cache_folder(source)
    if (out / MANIFEST).is_file() and (out / "config.json").is_file():
        return str(out.resolve()), [f"serving the earlier merge of {source} in {out}"]
    export(str(source), str(out))  # the export action: refuses a folder holding anything it did not write
    return str(out.resolve()), [f"merged the LoRA adapter {source} into its base: {out}"]


def merge_cache_folder(adapter: Path) -> Path:
    """Where an adapter's merge is kept: the cache, keyed by the adapter's path and its files' sizes and times."""
    adapter = adapter.resolve()
    files = sorted(p for p in adapter.rglob("*") if p.is_file())
    key = "\n".join([str(adapter)] + [f"{p.relative_to(adapter)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    cache = gguf_cache_dir().parent  # the project's cache ($HELLO_AGENTS_CACHE), beside the GGUF imports
    return cache / "merged" / f"{adapter.parent.name}-{adapter.name}-{digest}"


def check_port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on, before anything is merged or loaded."""
    if not 0 < port < 65536:
        raise ConfigError(f"`port`: {port} is not a TCP port; give one from 1 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as error:
        raise ConfigError(f"`host`: {host!r} is not an address of this machine ({error.strerror}); "
                          "give one such as 127.0.0.1") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the engines bind: TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as error:
            raise ConfigError(f"`port`: {host}:{port} is in use or cannot be opened ({error.strerror}); stop what "
                              "listens there, or choose another --port") from None


def pick_engine(engine: str = "auto") -> str:
    if engine not in ENGINES:
        raise ConfigError(f"`engine`: {engine!r} is not one of {', '.join(ENGINES)}")
    has_vllm = importlib.util.find_spec("vllm") is not None
    if engine == "vllm" or (engine == "auto" and has_vllm):
        import torch

        if not (has_vllm and torch.cuda.is_available()):
            if engine == "vllm":
                raise ConfigError("`engine`: vllm needs `pip install vllm` and a CUDA GPU; use --engine transformers")
            return "transformers"
        return "vllm"
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        raise ConfigError("`engine`: `transformers serve` needs fastapi, uvicorn and openai: "
                          "pip install 'transformers[serving]'")
    return "transformers"


def check_8bit(engine: str) -> str:
    """The engine that serves in 8 bits here, or a ConfigError saying why this machine cannot."""
    if engine == "vllm":
        raise ConfigError("`load_in_8bit`: vLLM quantizes on the fly in 4 bits only; use --engine transformers "
                          "for 8-bit loading, or serve a pre-quantized checkpoint with vLLM")
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("`load_in_8bit`: 8-bit loading (bitsandbytes LLM.int8) needs a CUDA GPU and this machine "
                          "has none; serve in full precision (drop --load-in-8bit) or on a GPU")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError("`load_in_8bit`: needs bitsandbytes: pip install bitsandbytes")
    return "transformers"


# transformers' continuous batching: 256 tokens a block, 128 blocks = 16 requests of 2,048 tokens (SmolLM2-135M: 1.5 GB)
BATCHING_KV_BLOCKS = 128


def plan(model: str, host: str = "127.0.0.1", port: int = 8000, engine: str = "auto",
         merged_dir: str | None = None, load_in_8bit: bool = False, batching: bool = False) -> ServePlan:
    """Validate everything, merge an adapter if needed, and say which command will serve it. `batching`: requests
    that arrive together are decoded together (transformers' continuous batching; vLLM always does)."""
    chosen = check_8bit(engine) if load_in_8bit else pick_engine(engine)  # both before anything is merged
    folder, notes = model_folder(model, merged_dir)
    # The chat template as evaluation renders it: Qwen3's thinking mode off unless the run recorded otherwise.
    recorded = _recorded_prompt(folder)
    thinking = bool(recorded.get("enable_thinking", False))
    if chosen == "vllm":
        # vLLM takes chat_template_kwargs per request (extra_body); docs/agents.md shows enable_thinking there
        command = [_executable("vllm"), "serve", folder, "--host", host, "--port", str(port), "--served-model-name", folder]
        if _writes_tool_call_tags(folder):  # Qwen-style <tool_call>{json}</tool_call>: vLLM's hermes parser reads it
            command += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    else:
        # transformers serve as it is, except that a tool_choice it would ignore is refused (transformers_serve.py)
        command = [sys.executable, "-m", "hello_agents_rl.workflows.transformers_serve", "serve", folder,
                   "--host", host, "--port", str(port), "--chat-template-kwargs", json.dumps({"enable_thinking": thinking})]
        if load_in_8bit:
            command += ["--quantization", "bnb-8bit"]
        if batching:  # its KV cache sized for the batch: by default it takes 90% of free memory (RAM on a CPU)
            command += ["--continuous-batching", "--cb-num-blocks", str(BATCHING_KV_BLOCKS)]
    system = recorded.get("system_prompt")
    if system:
        notes.append(f"trained with the system prompt {system!r}: send it as the first message for the same answers")
    return ServePlan(folder, chosen, command, f"http://{host}:{port}/v1", notes)


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, engine: str = "auto",
          merged_dir: str | None = None, dry_run: bool = False, load_in_8bit: bool = False,
          batching: bool = False) -> int:
    if not dry_run:  # a dry run only prints the command
        check_port_free(host, port)
    served = plan(model, host, port, engine, merged_dir, load_in_8bit, batching)
    for note in served.notes:
        print(f"[serve] {note}", file=sys.stderr)
    print(f"[serve] {served.engine}: OpenAI-compatible API at {served.base_url} (model={served.model!r})",
          file=sys.stderr, flush=True)
    if dry_run:
        print(json.dumps({"engine": served.engine, "model": served.model, "base_url": served.base_url,
                          "command": served.command}, indent=2))
        return 0
    os.execv(served.command[0], served.command)  # the engine takes over the process: Ctrl-C goes straight to it


@contextmanager
def running(model: str, host: str = "127.0.0.1", port: int | None = None, engine: str = "transformers",
            timeout_s: float = 180.0, batching: bool = False) -> Iterator[str]:
    """`hello-agents-rl serve MODEL` in a child process (a free port when none is given) until the block ends; yields
    its base URL once it answers. `batching`: concurrent requests are decoded together (`serve --batching`)."""
    import subprocess
    import time
    import urllib.request

    if port is None:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
    command = [sys.executable, "-m", "hello_agents_rl.cli", "serve", model, "--host", host, "--port", str(port),
               "--engine", engine, *(["--batching"] if batching else [])]
    # its log goes to a file: a pipe nobody reads fills after 64 KB of request lines, and the server then stalls
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
    # a child of this process alone: it ends with it, however it ends (a demo stopped while its agents are scored)
    server = children.start(command, die_with=signal.SIGTERM, stdout=subprocess.DEVNULL, stderr=log)
    base_url = f"http://{host}:{port}/v1"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if server.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"`serve {model}` stopped: {log.read()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base_url}/models", timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"`serve {model}` did not answer within {timeout_s:g} s") from None
                time.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def served_model_id(base_url: str) -> str:
    """The name a running server answers to (a pinned server refuses any other, a relative path included), checked
    with one short chat request under that name: a client that sends it reaches the model."""
    import urllib.request

    with urllib.request.urlopen(f"{base_url}/models", timeout=30) as response:
        model = json.load(response)["data"][0]["id"]
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "1"}], "max_tokens": 1}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300):  # an HTTP error raises: the server cannot answer that name
        return model


def _recorded_prompt(folder: str) -> dict:
    """The system prompt and thinking mode a run saved beside its model, where this version records them."""
    try:
        from hello_agents_rl.models import recorded_prompt
    except ImportError:
        return {}
    return recorded_prompt(folder) or {}


def _writes_tool_call_tags(folder: str) -> bool:
    """Whether the model's saved chat template writes tool calls as <tool_call>{json}</tool_call>."""
    files = [Path(folder) / "chat_template.jinja", Path(folder) / "tokenizer_config.json"]
    return any(f.is_file() and "<tool_call>" in f.read_text(encoding="utf-8", errors="replace") for f in files)


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name  # the venv's own engine, not whatever PATH finds first
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        raise ConfigError(f"`engine`: the `{name}` command is not installed in this environment")
    return found
