"""Fetching weights and tokenizers: a local folder or the hub, failing fast with the fix instead of a hang."""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.models.sources import resolve_model_source


def safetensors_problem(file: Path) -> str | None:
    """Why a .safetensors file cannot be read (truncated, bad header), or None; reads the header only."""
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            header_length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(header_length))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"unreadable header: {error}"
    expected = 8 + header_length + end
    return f"{size} bytes where its header promises {expected}: cut short" if size < expected else None


def check_weights(folder: str, key: str) -> None:
    """A truncated weights file (a full disk, an interrupted copy) named as such, not as a loader traceback."""
    for file in sorted(Path(folder).glob("*.safetensors")):
        if problem := safetensors_problem(file):
            raise ConfigError(f"`{key}`: {file} is damaged ({problem}); copy or save the model again")


def from_pretrained(cls: Any, name: str, key: str = "model_name", **kwargs: Any) -> Any:
    """from_pretrained that fails fast with the fix instead of a hang or a bare traceback."""
    source = resolve_model_source(name)
    local = Path(source).exists()
    if local:
        check_weights(source, key)
    try:
        return cls.from_pretrained(source, local_files_only=local or offline(), **kwargs)
    except (OSError, ValueError) as error:
        where = f"the folder {source}" if local else f"the hub id {name!r}"
        if "trust_remote_code" in str(error):  # keep transformers' own explanation of custom code
            raise ConfigError(
                f"`{key}`: {source} needs its own Python code to load: {error} Set trust_remote_code: true only "
                "if you trust that code."
            ) from None
        raise ConfigError(
            f"`{key}`: could not load {cls.__name__.removeprefix('Auto')} from {where}: {str(error).splitlines()[0]} "
            f"Check the spelling, or download the model once and point {key} at its local folder "
            "(it needs config.json, weights and tokenizer files)."
        ) from None


def offline() -> bool:
    """Offline by setting, or because the hub cannot be reached (then only the local cache is tried)."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false") or not hub_reachable()


@functools.cache
def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick connection instead of huggingface_hub's retries with back-off (about a minute offline)."""
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False
