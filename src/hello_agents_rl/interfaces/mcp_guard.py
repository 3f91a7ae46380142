"""What an MCP agent may ask for: every path under the server's roots, no foreign code unless the server allows it.

Which keys are paths comes from the config models themselves (config.base.PathRole and SectionOf field
metadata), so a key added to a config, or a path given inside a nested section (a pipeline stage, search's
base, a search space's choices, an enqueued row, an evaluation), is guarded without a list kept here.

A library's own parameters (a reasoning-gym task's `dataset_config`) are not ours to list either: a task may
open any of its string parameters as a file (spell_backward's `data_file`, joined onto the library's folder,
where an absolute path or `..` leaves it). So every string in them, at any depth, is judged by its shape:
`..` is refused, and one that names a file -- absolute, starting with `~`, existing from the server's folder,
or under a key named like a file (`*file*`, `*path*`, `*dir*`, `*folder*`) -- must lie under a root like any
path. What is left (`"+"`, `"90"`, a bare name under another key) cannot leave the folder a library joins it onto.
"""

from __future__ import annotations

import json
import os
import re
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from hello_agents_rl.config.base import PathRole, SectionOf
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.paths import looks_like_local_path
from hello_agents_rl.rollouts.tool_registry import BUILTIN_TOOLS
from hello_agents_rl.tasks import imports_a_task
from hello_agents_rl.tasks.reasoning_gym import is_task_name
from hello_agents_rl.workflows.actions import ACTIONS

_DATA_FILES = (".jsonl", ".json", ".csv")
_SQLITE = "sqlite:///"
_FILE_KEY_RE = re.compile(r"file|path|dir|folder", re.IGNORECASE)  # a parameter a library opens, by its name


def markers(model: type[BaseModel], key: str) -> list[PathRole | SectionOf]:
    """The PathRole and SectionOf metadata of `model.key`, wherever they sit in its annotation."""
    field = model.model_fields.get(key)
    if field is None:
        return []  # an unknown key: validation refuses it by name
    found = [m for m in field.metadata if isinstance(m, (PathRole, SectionOf))]
    pending = [field.annotation]
    while pending:
        annotation = pending.pop()
        if typing.get_origin(annotation) is Annotated:
            found += [m for m in annotation.__metadata__ if isinstance(m, (PathRole, SectionOf))]
        pending += list(typing.get_args(annotation))  # Optional/Union members, dict/list items, Annotated's type
    return found


class Guard:
    """Raise ConfigError naming the first key (as a dotted path) that reaches outside the roots or asks for code."""

    def __init__(self, roots: list[str | Path], trust_remote_code: bool = False,
                 storage_schemes: tuple[str, ...] = ()) -> None:
        if not roots:
            raise ConfigError("--root: give at least one folder the server may read and write")
        self.roots = [Path(r).expanduser().resolve() for r in roots]
        for root in self.roots:
            if not root.is_dir():
                raise ConfigError(f"--root: {root} is not a folder")
        self.trust_remote_code = trust_remote_code
        self.storage_schemes = storage_schemes  # database schemes besides sqlite the owner allowed (--allow-storage)

    def check(self, params: dict[str, Any]) -> None:
        """One action's arguments (its `action` key, default train), before and after validation."""
        action = ACTIONS.get(params.get("action", "train"))
        if action is not None:  # an unknown action is refused by validation, by name
            self._section(action.config, params, "")
        self._code(params, "")

    # --- paths, driven by the config models ------------------------------------------------------------------

    def _section(self, model: type[BaseModel], params: Any, where: str) -> None:
        if isinstance(params, dict):
            for key, value in params.items():
                self._key(model, str(key), value, f"{where}.{key}" if where else str(key))

    def _key(self, model: type[BaseModel], key: str, value: Any, name: str) -> None:
        for marker in markers(model, key):
            if isinstance(marker, PathRole) and marker.kind == "parameters":
                self._parameters(value, name, "")
            elif isinstance(marker, PathRole) and marker.kind == "task_ref":
                for where, ref in _choices(value, name).items():  # one, or one per completion
                    self._parameters(_ref_params(ref), f"{where}.params", "")
            elif isinstance(marker, PathRole):
                self._paths(marker.kind, value, name)
            elif marker.shape == "section":
                self._section(marker.model, value, name)
            elif marker.shape == "rows" and isinstance(value, list):
                for i, row in enumerate(value):
                    self._section(marker.model, row, f"{name}.{i}")
            elif marker.shape == "space" and isinstance(value, dict):
                for searched, spec in value.items():  # choices [a, b] or a range {low, high}: each as the key's value
                    items = enumerate(spec) if isinstance(spec, list) else spec.items() if isinstance(spec, dict) else ()
                    for label, choice in items:
                        self._key(marker.model, str(searched), choice, f"{name}.{searched}.{label}")

    def _paths(self, kind: str, value: Any, name: str) -> None:
        """Every string in `value` (a path, or a dict/list of them, e.g. compare's models) checked as `kind`."""
        if isinstance(value, dict):
            for label, item in value.items():
                self._paths(kind, item, f"{name}.{label}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self._paths(kind, item, f"{name}.{i}")
        elif isinstance(value, str):
            if kind == "storage":
                self._storage(name, value)
            elif kind == "path" or _is_local(kind, value):
                self._under_roots(name, value)

    def _parameters(self, value: Any, name: str, key: str) -> None:
        """A library's parameters: every string at any depth judged by its shape and its key (module docstring)."""
        if isinstance(value, dict):
            for label, item in value.items():
                self._parameters(item, f"{name}.{label}", str(label))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                self._parameters(item, f"{name}.{i}", key)
        elif isinstance(value, str):
            if ".." in re.split(r"[/\\]", value):
                raise ConfigError(f"`{name}`: {value!r} climbs out of a folder with '..', and the library, not this "
                                  "server, decides which folder; give an absolute path under "
                                  f"{', '.join(map(str, self.roots))}")
            if names_a_file(key, value):
                self._under_roots(name, value)

    def _storage(self, name: str, value: str) -> None:
        scheme = value.split("://", 1)[0].split("+", 1)[0]
        if scheme in self.storage_schemes:
            return  # a database server the owner allowed by name; it has no path to confine
        if not value.startswith(_SQLITE):
            allowed = ", ".join(self.storage_schemes) or "none"
            raise ConfigError(f"`{name}`: over MCP the storage is an SQLite file under the allowed folders "
                              f"(sqlite:///<path>); other databases need a server started with --allow-storage "
                              f"<scheme> (allowed now: {allowed})")
        path = value.removeprefix(_SQLITE)
        # SQLAlchemy passes a query string to SQLite (?uri=true makes `file:...` a URI naming any file) and
        # decodes %-escapes: only a plain file name is judged the way SQLite will open it
        if not path or path.startswith("file:") or any(c in path for c in "?#%"):
            raise ConfigError(f"`{name}`: {value!r} is not a plain SQLite file; give sqlite:///<path under "
                              "the allowed folders> with no query string, no %-escapes and no file: URI")
        self._under_roots(name, path)

    def _under_roots(self, name: str, value: str) -> None:
        path = Path(value).expanduser()
        path = (path if path.is_absolute() else Path.cwd() / path).resolve()  # symlinks and .. resolved
        if not any(path == root or root in path.parents for root in self.roots):
            raise ConfigError(f"`{name}`: {value} is outside the folders this server may use "
                              f"({', '.join(map(str, self.roots))}); give a path under one of them")

    # --- foreign code: the keys that import or run code, at any depth -------------------------------------------

    def _code(self, params: Any, where: str) -> None:
        if self.trust_remote_code:
            return
        if isinstance(params, list):
            for i, item in enumerate(params):
                self._code(item, f"{where}.{i}" if where else str(i))
            return
        if not isinstance(params, dict):
            return
        for key, value in params.items():
            name = f"{where}.{key}" if where else str(key)
            if key == "trust_remote_code" and any(_choices(value, name).values()):
                raise ConfigError(f"`{name}`: this server does not run a model repository's own code; "
                                  "start it with --trust-remote-code to allow it")
            if key == "tools" and isinstance(value, list):
                for label, tool in _choices(value, name).items():
                    if not (isinstance(tool, str) and tool in BUILTIN_TOOLS):
                        raise ConfigError(f"`{label}`: {tool!r} is not a built-in tool ({', '.join(BUILTIN_TOOLS)}); "
                                          "importing code needs a server started with --trust-remote-code")
            elif key == "dataset" and isinstance(value, str) and imports_a_task(value):
                raise ConfigError(f"`{name}`: {value!r} imports a Task class of your own; start the server with "
                                  "--trust-remote-code to allow it")
            elif key == "environment" and value is not None:
                raise ConfigError(f"`{name}`: an environment class is imported code; start the server with "
                                  "--trust-remote-code to allow it")
            elif isinstance(value, (dict, list)):
                self._code(value, name)


def _is_local(kind: str, value: str) -> bool:
    """A model or dataset string that names something on disk (not a hub id, built-in dataset or task)."""
    if kind == "dataset" and is_task_name(value):
        return False
    return looks_like_local_path(value) or (kind == "dataset" and value.endswith(_DATA_FILES))


def names_a_file(key: str, value: str) -> bool:
    """A library parameter that may name a file: under a file-like key, starting with `~`, or absolute or
    existing from the server's folder with a name of its own (not the bare "/" of an operator list)."""
    if _FILE_KEY_RE.search(key) or value.startswith("~"):
        return True
    return bool(Path(value).name) and (os.path.isabs(value) or os.path.lexists(value))


def _ref_params(ref: Any) -> Any:
    """The task parameters a task_ref carries (validation refuses one that is not JSON)."""
    try:
        return json.loads(ref).get("params") if isinstance(ref, str) else None
    except (ValueError, AttributeError):
        return None


def _choices(value: Any, name: str) -> dict[str, Any]:
    """A value, or each item of a list (and of lists in it: a search space's choices), by its dotted name."""
    if not isinstance(value, list):
        return {name: value}
    found: dict[str, Any] = {}
    for i, item in enumerate(value):
        found.update(_choices(item, f"{name}.{i}"))
    return found
