"""The README's quick start as a reader runs it: the book's call in a plain script (top-level code, no main guard)
after `make demo`, from the same folder; the Chinese quick start gives the same commands and the same call."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ENGLISH, CHINESE = README.split("## 快速开始（中文）", 1)


def _book_call(text: str) -> str:
    return next(block for block in re.findall(r"```python\n(.*?)```", text, re.S) if '"action": "train"' in block)


def _call_arguments(snippet: str) -> dict:
    call = next(node for node in ast.walk(ast.parse(snippet)) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and node.func.attr == "run")
    return ast.literal_eval(call.args[0])


def test_both_languages_give_the_same_commands_and_the_same_call() -> None:
    def commands(text: str) -> list[str]:
        return [line.split("#")[0].strip() for line in re.findall(r"```bash\n(.*?)```", text, re.S)[0].splitlines()]

    assert commands(ENGLISH) == commands(CHINESE) == ["make demo", "make test"]
    assert _call_arguments(_book_call(ENGLISH)) == _call_arguments(_book_call(CHINESE))


def undefined_names(snippet: str) -> list[str]:
    """The names a snippet reads that it neither imports, defines nor assigns (a reader's NameError)."""
    import builtins

    tree = ast.parse(snippet)
    defined = set(dir(builtins)) | {alias.asname or alias.name for node in ast.walk(tree)
                                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    defined |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    defined |= {node.name for node in ast.walk(tree) if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    defined |= {arg.arg for node in ast.walk(tree) if isinstance(node, ast.arguments) for arg in node.args}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return sorted(used - defined)


def test_the_agent_snippet_defines_every_name_it_uses_and_starts_from_a_model_a_make_target_leaves() -> None:
    """The snippet once used an undefined `MyCalculator`, a `./models/sft` nothing made, and no hello-agents Config."""
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", ENGLISH, re.S) if '"agent": agent' in block)
    tree = ast.parse(snippet)
    assert undefined_names(snippet) == []
    assert "Config(" in snippet, "hello-agents 1.0.0's default Config adds tools of its own and writes files"
    start = next(value.value for node in ast.walk(tree) if isinstance(node, ast.Dict)
                 for key, value in zip(node.keys, node.values)
                 if isinstance(key, ast.Constant) and key.value == "model_name")
    makefile = (ROOT / "Makefile").read_text()
    assert any(f"--output-dir {Path(start).parent}" in line for line in makefile.splitlines()), start
