"""Tools a model may call: the built-ins (one registry), user callables, import strings, environments.

Every tool handed to TRL or to the rollout loop is guarded first (`rollouts/tool_guard.py`).
"""

from __future__ import annotations

import ast
import inspect
import math
import operator
import sys
import types
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from hello_agents_rl.errors import ConfigError, did_you_mean
from hello_agents_rl.imports import import_named
from hello_agents_rl.rollouts.sandbox import SandboxError, run_sandboxed


class ToolFailure(Exception):
    """A failed call: raised by a tool (or its guard) so that TRL counts it."""


# --- the built-ins --------------------------------------------------------------------------------------------

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_MAX_EXPRESSION_CHARS = 200
_MAX_EXPONENT = 64
_MAX_DIGITS = 400


def _exact(node: ast.AST) -> Fraction:
    """Walk the parsed expression: numbers, + - * / // % ** and parentheses; nothing else is evaluated."""
    if isinstance(node, ast.Expression):
        return _exact(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _exact(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _exact(node.left), _exact(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > _MAX_EXPONENT):
            raise ValueError(f"exponent must be a whole number up to {_MAX_EXPONENT}")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ValueError("division by zero")
        value = _BINARY[type(node.op)](left, right)
        if len(str(value.numerator)) > _MAX_DIGITS:
            raise ValueError("result too large")
        return value
    raise ValueError(f"unsupported syntax {type(node).__name__}: only numbers, + - * / // % ** and ( )")


def _plain_number(value: Fraction) -> str:
    """19432, 0.75, or 1/3 when no finite decimal is exact."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    if den == 1:
        return format(value.numerator / value.denominator, "f").rstrip("0") if abs(value) < 1e15 else str(value)
    return f"{value.numerator}/{value.denominator}"


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: The arithmetic expression, for example "347 * 56" or "(12 + 3) / 4".
    """
    text = str(expression).replace("×", "*").replace("÷", "/").replace("^", "**").strip()
    if not text or len(text) > _MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression must be 1 to {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")  # parsed, never eval'd: only the node types above are computed
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {text!r}") from None
    return _plain_number(_exact(tree))


PYTHON_TIME_LIMIT_S = 5.0
PYTHON_MEMORY_LIMIT_BYTES = 512 * 2**20
_PYTHON_BOOTSTRAP = (  # runs in the child before the snippet: limits it cannot lift (hard limits)
    "import resource, sys\n"
    "m = int(sys.argv[2]); resource.setrlimit(resource.RLIMIT_AS, (m, m))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20))\n"
    # a CPU-time limit the kernel enforces: a busy loop dies even if the process that should kill it is gone
    "c = int(sys.argv[3]); resource.setrlimit(resource.RLIMIT_CPU, (c, c))\n"
    "code = sys.argv[1]; del sys.argv[1:]\n"
    "exec(compile(code, '<snippet>', 'exec'), {'__name__': '__main__'})\n"
)


def python(code: str) -> str:
    """Run a Python snippet and return what it prints.

    Args:
        code: Python source code; print() the values you want back.
    """
    # a fresh interpreter (-I: no user site, no PYTHON* variables) in the sandbox (rollouts/sandbox.py: bubblewrap,
    # or the fallback), with a wall-time limit (every descendant is killed), an address-space, a CPU-time and a
    # 1 MiB file limit
    try:
        done = run_sandboxed([sys.executable, "-I", "-c", _PYTHON_BOOTSTRAP, str(code), str(PYTHON_MEMORY_LIMIT_BYTES),
                              str(math.ceil(PYTHON_TIME_LIMIT_S) + 1)], PYTHON_TIME_LIMIT_S)
    except SandboxError as error:
        raise ToolFailure(f"python: {error}") from None
    if done.timed_out:
        raise ToolFailure(f"python: timed out after {PYTHON_TIME_LIMIT_S:g} s")
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ToolFailure(f"python: {last[0][-300:]}")
    return done.stdout.strip() or "(no output; print() the values you want back)"


BUILTIN_TOOLS: dict[str, Callable[..., Any]] = {"calculator": calculator, "python": python}


# --- validation -------------------------------------------------------------------------------------------------


def check_schema(fn: Callable[..., Any], key: str) -> dict[str, Any]:
    """The JSON schema TRL will render for `fn`; ConfigError when hints or the docstring are missing."""
    from transformers.utils import get_json_schema  # lazily: validation must stay light

    try:
        return get_json_schema(fn)
    except Exception as error:  # noqa: BLE001 - transformers raises several types for the same problem
        name = getattr(fn, "__name__", repr(fn))
        raise ConfigError(
            f"`{key}`: tool {name!r} cannot be described to the model ({str(error).splitlines()[0]}). Fix: give it "
            "type hints on every parameter and a docstring with a one-line summary and an `Args:` section "
            "describing each parameter (TRL renders these into the prompt)."
        ) from None


def resolve_tool(spec: Any, key: str) -> Callable[..., Any]:
    """A built-in name, an import string 'pkg.mod:fn', or a callable -> the callable, checked."""
    if isinstance(spec, str):
        if spec in BUILTIN_TOOLS:
            return BUILTIN_TOOLS[spec]
        if ":" not in spec and "." not in spec:

            raise ConfigError(
                f"`{key}`: unknown tool {spec!r}{did_you_mean(spec, list(BUILTIN_TOOLS))} Built-in tools: "
                f"{', '.join(BUILTIN_TOOLS)}; or give an import string 'package.module:function' or a callable."
            )
        spec = import_named(spec, key)
    if inspect.isclass(spec) or not callable(spec):
        raise ConfigError(
            f"`{key}`: {spec!r} is not a function. Fix: tools are functions with type hints and a docstring; "
            "a class with state goes to `environment`."
        )
    check_schema(spec, key)
    return spec


def resolve_tools(specs: list[Any] | None) -> list[Callable[..., Any]]:
    """The tools, checked; hello-agents Tools (or a ToolRegistry) as the SimpleAgent over them sends and runs them."""
    from hello_agents_rl.rollouts.agent_spec import agent_spec, implicit_agent, is_hello_agents_tool

    theirs = [spec for spec in specs or [] if is_hello_agents_tool(spec)]
    tools = [resolve_tool(spec, f"tools[{i}]") for i, spec in enumerate(specs or []) if not is_hello_agents_tool(spec)]
    if theirs:
        tools += agent_spec(implicit_agent(theirs), "tools").tools()
    names = [t.__name__ for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"`tools`: two tools are named {duplicates[0]!r}; the model calls tools by name. Rename one.")
    return tools


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The methods TRL exposes as tools: public functions of the class, except reset and get_reward."""
    return {
        name: fn
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    }


def resolve_environment(spec: Any, key: str = "environment") -> type:
    """'pkg.mod:Class' or a class -> the class, checked: a `reset`, and tools TRL can describe."""
    cls = import_named(spec, key) if isinstance(spec, str) else spec
    if not inspect.isclass(cls):
        raise ConfigError(
            f"`{key}`: {spec!r} is not a class. Fix: give a class (or 'package.module:Class') whose instances "
            "have reset(**row) and public methods that are the tools."
        )
    if not callable(getattr(cls, "reset", None)):
        raise ConfigError(
            f"`{key}`: {cls.__name__} has no reset method. Fix: add `def reset(self, **row) -> str | None`, called "
            "at the start of every rollout with the dataset row (its return value is appended to the question)."
        )
    methods = public_methods(cls)
    if not methods:
        raise ConfigError(f"`{key}`: {cls.__name__} has no public methods, so the model would have no tools. Add one.")
    for name, fn in methods.items():
        check_schema(types.MethodType(fn, object()), f"{key}.{name}")  # bound: `self` is not a parameter
    return cls


PROBED_ROWS = 2  # rows whose reset is tried before the run: a reset broken for every row fails here, named


def probe_environment(cls: type, rows: Any, what: str = "training data", key: str = "environment") -> None:
    """ConfigError naming the class and the row when a fresh instance cannot be reset for one of the first rows."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    for index in range(min(PROBED_ROWS, len(rows))):
        row = dict(rows[index])
        try:
            cls().reset(**row)
        except Exception as error:  # noqa: BLE001 - whatever the user's reset raises, named with its row
            shown = str(row.get("question", row))[:120]
            raise ConfigError(
                f"`{key}`: {name}.reset failed on row {index} of the {what} ({shown!r}): {type(error).__name__}: "
                f"{error}. Fix: make reset work for that row (it is called at the start of every rollout with the "
                f"row's columns as keyword arguments: {', '.join(row)}), or fix the row."
            ) from None
