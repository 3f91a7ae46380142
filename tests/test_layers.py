"""The layout holds: leaves import nothing of the package, no layer imports one above it, no import cycle, small modules.

Imports inside functions count too: a cycle hidden in a function is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hello_agents_rl"
LEAVES = {"errors", "paths", "imports", "children", "bounded", "distributed", "compat", "coupling", "trainers.fast.switches",
          "trajectory"}
# Bottom to top (docs/design.md). config is the schema: it sits below the engine and validates through the
# pure-Python checks of data, rewards and rollouts, which never import it back.
LAYERS = ["config", "rewards", "tasks", "data", "rollouts", "models", "outputs", "trainers", "evaluation", "workflows", "interfaces"]
PUBLIC_ENTRY_POINTS = {"__init__", "__main__", "cli", "schema"}  # one-line public modules over interfaces/
CONFIG_MAY_CALL = {"rewards", "tasks", "rollouts"}  # validation entry points, pure Python
MAX_LINES = 400
FAST_PATH_MAX_LINES = 2000


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The package module an import names (`hello_agents_rl.rewards.build_reward` -> `rewards`)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name.startswith("hello_agents_rl."):
                target = _resolve(name.removeprefix("hello_agents_rl."))
                if target and target != module:
                    found.add(target)
    return found


def _deepest_import(module: str) -> set[str]:
    """`from hello_agents_rl.x import y` names both x and x.y: keep the deepest of each chain."""
    found = imports_of(module)
    return {m for m in found if not any(o.startswith(m + ".") for o in found)}


def layer_of(module: str) -> str:
    return module.split(".")[0]


def test_leaves_import_nothing_of_the_package() -> None:
    """Nothing but other leaves (bounded starts its workers through children)."""
    assert {leaf: sorted(imports_of(leaf) - LEAVES) for leaf in LEAVES if imports_of(leaf) - LEAVES} == {}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer_of(m) in LAYERS and m not in LEAVES))
def test_no_layer_imports_one_above_it(module: str) -> None:
    rank = LAYERS.index(layer_of(module))
    above = []
    for target in _deepest_import(module):
        if target in LEAVES or layer_of(target) not in LAYERS:
            continue
        if layer_of(module) == "config" and any(target == c or target.startswith(c + ".") for c in CONFIG_MAY_CALL):
            continue
        if LAYERS.index(layer_of(target)) > rank:
            above.append(target)
    assert not above, f"{module} imports {above}, a layer above it"


def test_the_validation_entry_points_never_import_config_back() -> None:
    callers = {m: sorted(t for t in imports_of(m) if layer_of(t) == "config") for m in MODULES
               if any(m == c or m.startswith(c + ".") for c in CONFIG_MAY_CALL)}
    assert {m: t for m, t in callers.items() if t} == {}


def test_no_import_cycle() -> None:
    graph = {m: _deepest_import(m) for m in MODULES}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle.extend(stack[stack.index(nxt):] + [node, nxt] if nxt in stack else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, stack + [node]):
                return True
        state[node] = 2
        return False

    for module in sorted(graph):
        if state.get(module) is None and visit(module, []):
            break
    assert not cycle, " -> ".join(cycle)


def test_no_two_subpackages_import_each_other() -> None:
    """Subpackages as wholes: config may call tasks to validate, but then no module of tasks may import config."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module in MODULES:
        for target in _deepest_import(module):
            if layer_of(module) != layer_of(target):
                edges.setdefault((layer_of(module), layer_of(target)), []).append(f"{module} -> {target}")
    both = {f"{a} <-> {b}": edges[(a, b)] + edges[(b, a)] for a, b in edges if a < b and (b, a) in edges}
    assert both == {}


def test_public_entry_points_are_only_re_exports() -> None:
    for name in PUBLIC_ENTRY_POINTS:
        assert len(MODULES[name].read_text(encoding="utf-8").splitlines()) <= 12, name


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_source_file_over_the_size_limit() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in MODULES.values() if (n := _lines(p)) > MAX_LINES}
    assert long == {}


def test_the_fast_path_is_plain_python_within_its_size() -> None:
    """No hand-written kernels to compile (torch's own kernels serve every CPU), and a fast path a reader can hold."""
    assert [p.name for p in PACKAGE.rglob("*") if p.suffix in (".cpp", ".h", ".cu", ".c")] == []
    fast = PACKAGE / "trainers" / "fast"
    assert sum(_lines(p) for p in fast.rglob("*.py")) <= FAST_PATH_MAX_LINES


def test_the_design_doc_points_at_files_that_hold_what_it_names() -> None:
    """docs/design.md's "where to change what": each `NAME` (`path`) pair is a real file that defines NAME."""
    import re

    doc = (PACKAGE.parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    table = doc.split("## Where to change what", 1)[1].split("##", 1)[0]
    pairs = re.findall(r"`([A-Z_]+)`[^`|]*?\(`([\w/.]+\.py)`", table)
    assert len(pairs) >= 4, pairs
    for name, path in pairs:
        source = (PACKAGE / path).read_text(encoding="utf-8")
        assert re.search(rf"^{name}\b.*=", source, re.MULTILINE), f"{path} defines no {name}"
    for path in re.findall(r"`([\w/]+\.py)`", table):
        assert (PACKAGE / path).is_file(), path
