"""The generated blocks of README.md and docs/*.md (`<!-- name:start -->` ... `<!-- name:end -->`): figures come
from script runs.

Scripts write a block from what they measured, into whichever page holds its markers (a block moves with its
markers); tests/test_readme.py fails when a block and its source disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # a source checkout
README = ROOT / "README.md"


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"


def page_of(name: str) -> Path:
    """The page (README.md or a page of docs/) that holds block `name`."""
    start = _markers(name)[0]
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        if start in page.read_text(encoding="utf-8"):
            return page
    raise KeyError(f"no page holds the block {name!r}")


def read_block(name: str, readme: Path | None = None) -> str:
    start, end = _markers(name)
    return (readme or page_of(name)).read_text(encoding="utf-8").split(start, 1)[1].split(end, 1)[0]


def write_block(name: str, text: str, readme: Path | None = None) -> None:
    start, end = _markers(name)
    readme = readme or page_of(name)
    content = readme.read_text(encoding="utf-8")
    head, rest = content.split(start, 1)
    tail = rest.split(end, 1)[1]
    readme.write_text(head + start + text + end + tail, encoding="utf-8")


def write_from_record(name: str, render: Callable[[dict], str], record: Path) -> str:
    """Block `name` rendered from a benchmark's JSON record in docs/ (what tests/test_readme.py compares)."""
    text = render(json.loads(record.read_text()))
    write_block(name, text)
    return text
