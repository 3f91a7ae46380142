"""Regenerate the README's parameter tables from the config models (the single source of defaults)."""

from pathlib import Path

from hello_agents.rl.actions import markdown_tables

START, END = "<!-- params:start -->\n", "<!-- params:end -->"

readme = Path(__file__).resolve().parents[1] / "README.md"
text = readme.read_text(encoding="utf-8")
head, rest = text.split(START)
_, tail = rest.split(END)
readme.write_text(head + START + markdown_tables() + END + tail, encoding="utf-8")
