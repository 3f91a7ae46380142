"""A leaf: what a name a user gave refers to (a path on disk or a hub id) and what the filesystem says
about a path. Imports nothing of the package.

Each `*_problem` returns why the path cannot be used, or None; the config layer turns that into a
ConfigError naming the key.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def looks_like_local_path(name: str) -> bool:
    """A hub id is `org/name` (one slash, no leading dot); anything else is a path on disk."""
    return (
        name.startswith((".", "/", "~"))
        or "\\" in name
        or name.count("/") > 1
        or name.endswith(".gguf")
        or os.path.exists(name)
    )


def local_path_problem(name: str) -> str | None:
    """Why a model path that looks local cannot be used (it does not exist), or None."""
    if looks_like_local_path(name) and not os.path.exists(os.path.expanduser(name)):
        return f"local path {name!r} does not exist; check the path (a run's output_dir, its model/ folder or a .gguf file)"
    return None


def writable_problem(value: str, kind: str = "folder") -> str | None:
    """Why `value` cannot be written as a folder or a file, or None; touches nothing that stays."""
    if not value.strip():
        return "is empty; give a path"
    path = Path(value).expanduser().resolve()
    if kind == "file" and path.is_dir():
        return f"{value} is a folder; give a file path such as {Path(value) / 'details.jsonl'}"
    if kind == "folder" and path.exists() and not path.is_dir():
        return f"{value} is a file; give a folder path"
    existing = next(p for p in [path if kind == "folder" else path.parent, *path.parents] if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, so nothing can be created below it"
    try:  # a real probe: os.access says yes to root even on read-only mounts like /proc
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError:
        return f"{existing} is not a writable folder; choose a path you can write to"
    return None


def overlap_problem(model_name: str, output_dir: str) -> str | None:
    """A run replaces files in output_dir: it must not hold (or sit inside) the model being trained."""
    if not looks_like_local_path(model_name):
        return None
    source, out = Path(model_name).expanduser().resolve(), Path(output_dir).expanduser().resolve()
    if source == out or source in out.parents:
        return f"`output_dir`: {output_dir} is inside model_name {model_name}; write the new run to a folder of its own"
    if out in source.parents:
        return (f"`model_name`: {model_name} lies inside output_dir {output_dir}, whose files the run replaces; "
                "write the new run to another output_dir")
    return None
