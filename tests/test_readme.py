"""The README's generated parts cannot drift from the code, and it links nothing outside the repository."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from hello_agents_rl.actions import markdown_tables
from hello_agents_rl.readme import read_block

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_parameter_tables_match_the_config() -> None:
    assert read_block("params") == markdown_tables(), "run: .venv/bin/python scripts/update_readme.py"


def test_readme_test_command_is_what_ci_runs() -> None:
    assert "make test" in README and "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_demo_table_is_the_recorded_run_and_quotes_the_tests_margin() -> None:
    spec = importlib.util.spec_from_file_location("demo_seeds", ROOT / "benchmarks" / "demo_seeds.py")
    demo_seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo_seeds)
    recorded = json.loads((ROOT / "docs" / "demo_seeds.json").read_text())
    assert read_block("demo") == demo_seeds.render_readme(recorded), "run: benchmarks/demo_seeds.py --readme"


def test_the_real_model_paragraph_is_the_recorded_benchmarks() -> None:
    spec = importlib.util.spec_from_file_location("real_model_readme", ROOT / "benchmarks" / "real_model_readme.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    recorded = json.loads((ROOT / "docs" / "real_model.json").read_text())
    assert read_block("real-model") == script.render_readme(recorded), "run: benchmarks/real_model_readme.py"


def test_links_stay_inside_the_repository() -> None:
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#]+)", doc.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            resolved = (doc.parent / target).resolve()
            assert ROOT in resolved.parents and resolved.exists(), f"{doc.name} links {target}"
        assert "../shared" not in doc.read_text(encoding="utf-8"), doc.name
