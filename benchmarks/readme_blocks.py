"""The README's generated blocks (`<!-- name:start -->` ... `<!-- name:end -->`): figures come from script runs.

Scripts write a block from what they measured; tests/test_readme.py fails when a block and its source disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"  # the repository's README (a source checkout)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"


def read_block(name: str, readme: Path = README) -> str:
    start, end = _markers(name)
    return readme.read_text(encoding="utf-8").split(start, 1)[1].split(end, 1)[0]


def write_block(name: str, text: str, readme: Path = README) -> None:
    start, end = _markers(name)
    content = readme.read_text(encoding="utf-8")
    head, rest = content.split(start, 1)
    tail = rest.split(end, 1)[1]
    readme.write_text(head + start + text + end + tail, encoding="utf-8")


def write_from_record(name: str, render: Callable[[dict], str], record: Path) -> str:
    """Block `name` rendered from a benchmark's JSON record in docs/ (what tests/test_readme.py compares)."""
    text = render(json.loads(record.read_text()))
    write_block(name, text)
    return text
