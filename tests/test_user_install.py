"""Installed as a user installs it: this project's wheel, its dependencies resolved by pip from the package
registry within pyproject's ranges, into a clean virtual environment beside hello-agents 1.0.0. Then the book's
GRPO snippet (section 11.4) trains the tiny model through the book's own import line.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_command

# The book's basic GRPO example, as printed; only the model, the output folder and the sizes are the tiny run's.
SNIPPET = textwrap.dedent("""
    import json, sys
    from hello_agents.tools import RLTrainingTool

    rl_tool = RLTrainingTool()
    result = rl_tool.run({
        "action": "train",
        "algorithm": "grpo",
        "model_name": sys.argv[1],
        "output_dir": sys.argv[2],
        "max_samples": 4,
        "num_epochs": 1,
        "batch_size": 2,
        "learning_rate": 1e-5,
        "num_generations": 2,
        "max_new_tokens": 16,
        "kl_coef": 0.05,
        "use_lora": True,
        "lora_rank": 16,
        "lora_alpha": 32,
        "reward_type": "accuracy",
    })
    print(f"  - 模型保存路径: {result['model_path']}")
    print(f"  - 训练样本数: {result['num_samples']}")
    print(f"  - 训练轮数: {result['num_epochs']}")
    print(f"  - 平均奖励: {result['average_reward']:.4f}")
    print(json.dumps({k: result[k] for k in ("status", "num_samples", "model_path", "fast_path")}))
""")
VERSIONS = ("import json; from importlib.metadata import version as v; print(json.dumps({n: v(n) for n in "
            "('hello-agents', 'hello-agents-rl', 'torch', 'transformers', 'trl', 'peft', 'datasets', 'accelerate')}))")


@pytest.mark.slow
def test_a_clean_environment_installs_the_wheel_beside_hello_agents_and_runs_the_book(
        wheel: Path, tiny_model: str, gsm8k_dir: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run_command(getattr(sys, "_base_executable", sys.executable), "-m", "venv", venv)
    python = venv / "bin" / "python"
    pip = (python, "-m", "pip", "-q", "--disable-pip-version-check", "install")
    run_command(*pip, "torch==2.13.0", cwd=tmp_path)  # first, as the README says: a bare `torch` is a CUDA build
    run_command(*pip, "hello-agents==1.0.0", wheel, cwd=tmp_path)
    installed = json.loads(run_command(python, "-c", VERSIONS, cwd=tmp_path))
    assert installed["hello-agents"] == "1.0.0" and installed["torch"].startswith("2.13.0"), installed
    out = tmp_path / "grpo_model"
    env = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "HELLO_AGENTS_GSM8K": gsm8k_dir,
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    printed = run_command(python, "-c", SNIPPET, tiny_model, out, cwd=tmp_path, env=env, timeout=900)
    result = json.loads(printed.strip().splitlines()[-1])
    assert "训练样本数: 4" in printed and "平均奖励:" in printed
    assert result["status"] == "completed" and result["num_samples"] == 4
    assert Path(result["model_path"]).is_dir() and (out / "results.json").is_file()
    # on releases newer than the verified ones the fast path stands aside and says why
    reasons = [f["reason"] for f in result["fast_path"]["fallbacks"]]
    assert result["fast_path"]["sampler"] or any("verified" in r for r in reasons), (installed, reasons)


def test_the_install_page_states_the_declared_ranges_and_the_tested_ends() -> None:
    """docs/install.md's version table = pyproject's ranges, requirements-oldest.txt's and requirements.lock's pins."""
    import re

    import tomllib
    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = {Requirement(d).name: str(Requirement(d).specifier) for d in project["dependencies"]}
    declared["vllm"] = str(Requirement(project["optional-dependencies"]["vllm"][0]).specifier)

    def pins(name: str) -> dict[str, str]:
        return dict(re.findall(r"^([A-Za-z0-9_-]+)==(\S+)", (root / name).read_text(), re.M))

    oldest, lock = pins("requirements-oldest.txt"), pins("requirements.lock")
    readme = (root / "docs" / "install.md").read_text(encoding="utf-8")
    rows = {m[0]: (m[1], m[2], m[3]) for m in re.findall(
        r"^\| (\w+)(?: \(`\[vllm\]`\))? \| `([^`]+)` \| ([^|]+?) \| ([^|]+?) \|$", readme, re.M)}
    for name in ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "vllm"):
        supported, tested_oldest, tested_lock = rows[name]
        assert sorted(supported.split(",")) == sorted(declared[name].split(",")), name
        if name in lock:
            assert tested_lock.startswith(lock[name]), name
            assert tested_oldest.startswith(oldest.get(name, lock[name])), name


@pytest.mark.slow
def test_the_agent_extra_installs_beside_the_lock_without_moving_a_pin() -> None:
    """`pip install 'hello-agents-rl[agent]'` in the tested set adds hello-agents and what it needs, and changes no
    package the lock pins (hello-agents 1.0.0 wants openai<2: the lock's openai must be a 1.x)."""
    import re

    import tomllib

    root = Path(__file__).resolve().parents[1]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["agent"]
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", (root / "requirements.lock").read_text(), re.M))
    report = json.loads(run_command(sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                                    "--disable-pip-version-check", "--report", "-", *extra, timeout=600))
    moved = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]
             if item["metadata"]["name"].lower().replace("_", "-") in {p.lower().replace("_", "-") for p in pins}}
    assert moved == {}, f"installing {extra} would move pinned packages: {moved}"
    assert any(item["metadata"]["name"] == "hello-agents" for item in report["install"])
