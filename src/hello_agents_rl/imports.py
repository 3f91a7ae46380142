"""A leaf: the object an import string names ('package.module:name'), or a ConfigError naming the key and the fix."""

from __future__ import annotations

import importlib
import re
from typing import Any

from hello_agents_rl.errors import ConfigError, did_you_mean

IMPORT_STRING = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # package.module:name


def import_named(spec: str, key: str) -> Any:
    """`spec` is 'package.module:name' (or 'package.module.name')."""
    module_name, _, attribute = spec.partition(":") if ":" in spec else spec.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - a broken module is the user's to fix; say which
        raise ConfigError(
            f"`{key}`: cannot import {module_name!r} from {spec!r} ({type(error).__name__}: {error}). "
            "Fix: write 'package.module:name' with the package importable (installed, or on PYTHONPATH)."
        ) from None
    found: Any = module
    for part in attribute.split("."):  # a nested name: module:Class.attribute
        if not hasattr(found, part):
            public = [n for n in dir(found) if not n.startswith("_")]
            raise ConfigError(f"`{key}`: {module_name!r} has no attribute {attribute!r}{did_you_mean(part, public)} "
                              "Fix: write 'package.module:name'.")
        found = getattr(found, part)
    return found
