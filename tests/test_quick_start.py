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
