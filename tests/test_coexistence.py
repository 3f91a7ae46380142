"""Installed beside hello-agents (0.2.9 and 1.0.0 from the package registry), in fresh virtual environments.

Each environment borrows this project's dependencies (torch, transformers...) through a path file pointing at a
filtered view of the test environment's site-packages, so only hello-agents, its own dependencies and this
project's wheel are really installed there. Both install orders; then the first package is uninstalled and the
other must still work (tests/coexistence_probe.py checks what a user sees at each stage).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Venv, run_command

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("coexistence_probe.py")
RELEASES = ["0.2.9", "1.0.0"]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# the README's hello-agents example, as written; HelloAgentsLLM() reads these (it connects only when asked)
README_EXAMPLE = next(b for b in README.split("```python\n")[1:] if "register_tool(RLTrainingTool())" in b)
README_EXAMPLE = README_EXAMPLE.split("```")[0] + "print(agent.tool_registry.list_tools())\n"
LLM_ENV = {"LLM_MODEL_ID": "served-model", "LLM_API_KEY": "none", "LLM_BASE_URL": "http://127.0.0.1:9/v1"}


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_ours_first_then_hello_agents_then_ours_removed(release: str, wheel: Path,
                                                        fresh_venv: Callable[[], Venv]) -> None:
    venv = fresh_venv()
    venv.pip("install", "--no-deps", wheel)
    assert "ok:" in venv.run(PROBE, "ours-alone")
    venv.pip("install", f"hello-agents=={release}")
    assert "ok:" in venv.run(PROBE, "both")
    assert "rl_training" in venv.run("-c", README_EXAMPLE, env=LLM_ENV)
    venv.pip("uninstall", "-y", "hello-agents-rl")
    assert "ok:" in venv.run(PROBE, "theirs-alone")


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_hello_agents_first_then_ours_then_theirs_removed(release: str, wheel: Path,
                                                          fresh_venv: Callable[[], Venv]) -> None:
    venv = fresh_venv()
    venv.pip("install", f"hello-agents=={release}")
    assert "ok:" in venv.run(PROBE, "theirs-alone")
    venv.pip("install", "--no-deps", wheel)
    assert "ok:" in venv.run(PROBE, "both")
    venv.pip("uninstall", "-y", "hello-agents")
    assert "ok:" in venv.run(PROBE, "ours-alone")


def test_a_folder_left_behind_by_an_uninstall_does_not_hide_the_book_line(tmp_path: Path) -> None:
    """pip can leave an empty hello_agents/ (a __pycache__) behind: a namespace folder, not hello-agents."""
    (tmp_path / "hello_agents" / "__pycache__").mkdir(parents=True)
    code = ("from hello_agents.tools import RLTrainingTool; import hello_agents_rl.interfaces.tool as t; "
            "assert RLTrainingTool is t.RLTrainingTool; print('ok')")
    assert run_command(sys.executable, "-c", code, cwd=tmp_path).strip() == "ok"


def test_the_stand_in_says_what_it_is(tmp_path: Path) -> None:
    """Without hello-agents, probing code can tell the stand-in from the real package (docs/agents.md)."""
    code = ("import json, hello_agents, hello_agents.tools as tools; "
            "print(json.dumps([hello_agents.__version__, hello_agents.IS_STANDIN, tools.IS_STANDIN, dir(tools)]))")
    out = run_command(sys.executable, "-c", code, cwd=tmp_path, env={"PYTHONPATH": str(ROOT / "src")})  # this checkout
    version, marker, tools_marker, listed = json.loads(out)
    assert version.startswith("0.0.0+") and "standin" in version  # sorts below every hello-agents release
    assert marker is True and tools_marker is True
    assert "RLTrainingTool" in listed
