"""The README's parameter tables are generated from the config: they cannot drift from the code."""

from pathlib import Path

from hello_agents.rl.actions import markdown_tables


def test_readme_parameter_tables_match_the_config() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert markdown_tables() in readme, "run: .venv/bin/python scripts/update_readme.py"


def test_readme_test_command_is_what_ci_runs() -> None:
    root = Path(__file__).resolve().parents[1]
    assert "make test" in (root / "README.md").read_text() and "make test" in (root / ".ci" / "run").read_text()
