"""The book's line, `from hello_agents.tools import RLTrainingTool`, with or without hello-agents installed.

hello-agents owns the `hello_agents` package, so this project ships no file under it and neither install can
overwrite the other. Instead `hello_agents_rl.pth` (run by Python at start-up) puts one finder on
sys.meta_path that answers for two module names only:
- hello-agents installed: its modules load untouched, and `hello_agents.tools.RLTrainingTool` resolves to ours,
  a real hello-agents `Tool` (hello_agents_rl.interfaces.hello_agents_tool); 0.2.x's own tool stays in its builtin module.
- not installed: `hello_agents` and `hello_agents.tools` are stand-ins that hold RLTrainingTool and nothing else.
Uninstalling either package leaves the other as it was. Written by hand: an import hook is the standard
library's own mechanism for this (importlib's finders and loaders); no library offers it.
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:  # typing costs ~8 ms, and this module loads at every Python start-up
    from typing import Any

PACKAGE, TOOLS, NAME = "hello_agents", "hello_agents.tools", "RLTrainingTool"
# What the stand-ins say they are: a version below every hello-agents release, and a marker attribute that
# probing code reads as `getattr(hello_agents, "IS_STANDIN", False)` (hello-agents itself has no such name).
STANDIN_VERSION = "0.0.0+hello-agents-rl.standin"


class BookImportFinder:  # a sys.meta_path finder
    """Finds `hello_agents` and `hello_agents.tools`: the installed ones when there are, stand-ins otherwise."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in (PACKAGE, TOOLS):
            return None
        spec = _find_elsewhere(fullname, path, target)
        if spec is None:  # not installed (under a namespace folder an uninstall left, `tools` is absent too)
            return ModuleSpec(fullname, StandInLoader(), is_package=True)
        if fullname == TOOLS and spec.loader is not None:
            spec.loader = OfferOurTool(spec.loader)
        return spec


class OfferOurTool:  # an importlib loader
    """Runs hello-agents' own `hello_agents.tools`, then makes RLTrainingTool resolve to ours."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        offer_tool(module)

    def __getattr__(self, name: str) -> Any:  # resources, get_source, is_package...: the real loader's
        return getattr(self._loader, name)


class StandInLoader:  # an importlib loader
    """hello-agents is not installed: empty packages that hold only the book's tool."""

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = "Stand-in for hello-agents (not installed): holds the book's RLTrainingTool (hello-agents-rl)."
        module.IS_STANDIN = True  # type: ignore[attr-defined]
        if module.__name__ == PACKAGE:
            module.__version__ = STANDIN_VERSION  # type: ignore[attr-defined]
        if module.__name__ == TOOLS:
            offer_tool(module)


def offer_tool(module: ModuleType) -> None:
    """`module.RLTrainingTool` -> ours, imported on first use so `import hello_agents` stays as fast as it was."""
    module.__dict__.pop(NAME, None)  # 0.2.x's own tool, which ignores most of the book's keys
    earlier = module.__dict__.get("__getattr__")

    def __getattr__(name: str) -> Any:
        if name == NAME:
            from hello_agents_rl.interfaces.hello_agents_tool import book_tool_class

            tool_class = book_tool_class(module)
            setattr(module, NAME, tool_class)
            return tool_class
        if earlier is not None:
            return earlier(name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]  # PEP 562
    listed = module.__dict__.get("__dir__")
    # dir() lists the tool, which is imported only on first use
    module.__dir__ = lambda: sorted({*(listed() if listed else module.__dict__), NAME})  # type: ignore[attr-defined]
    names = module.__dict__.get("__all__")
    if isinstance(names, list) and NAME not in names:
        names.append(NAME)
    elif names is None:
        module.__all__ = [NAME]  # type: ignore[attr-defined]


def _find_elsewhere(fullname: str, path: Any, target: ModuleType | None) -> ModuleSpec | None:
    for finder in sys.meta_path:
        if isinstance(finder, BookImportFinder) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def install() -> None:
    """Called from hello_agents_rl.pth; safe to call twice (some venvs read site-packages twice)."""
    if any(isinstance(f, BookImportFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, BookImportFinder())
