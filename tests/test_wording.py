"""User-facing text names the book (Hello-Agents, section 11.4) as "the book", never "the seed", which reads
like the `seed` parameter. Checked: README.md, docs/*.md, and every string in src/ (messages, descriptions
that `--help` and the README print, docstrings)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "the seed's advice", "as the seed defines it", "(seed: 4-8)": the book in disguise. A random seed is "a seed",
# "each seed", "--seed 0" or the `seed` key, never "the seed" in these files.
BOOK_AS_SEED = re.compile(r"\bthe seed\b|\(seed: ", re.IGNORECASE)


def user_facing_texts(read=lambda path: path.read_text(encoding="utf-8")) -> dict[str, str]:
    texts = {str(p.relative_to(ROOT)): read(p) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    for path in sorted((ROOT / "src").rglob("*.py")):
        tree = ast.parse(read(path))
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        texts[str(path.relative_to(ROOT))] = "\n".join(strings)
    return texts


def offending(texts: dict[str, str]) -> list[str]:
    return [f"{name}: ...{text[max(0, m.start() - 40):m.end() + 40]!r}..."
            for name, text in texts.items() for m in BOOK_AS_SEED.finditer(text)]


def test_user_facing_text_says_the_book_not_the_seed() -> None:
    assert offending(user_facing_texts()) == []
