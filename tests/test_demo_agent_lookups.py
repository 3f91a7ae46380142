"""The multi-step agent demo's quick variant end to end, as a user runs it: `hello-agents-rl demo --task
agent-lookups --quick` in an environment with hello-agents 1.0.0. A ReActAgent with two Tools of its own (lookup,
calculator) is trained (SFT on a demonstrator that guesses or stops a chain one call short, then GRPO on the agent
itself), each model is served by `hello-agents-rl serve`, and `agent.run(question)` answers held-out questions about
entities training never saw; every call goes through the agent's own registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SRC, Venv

from hello_agents_rl.data import lookups

MARGIN = 0.15  # GRPO - SFT task success, the floor this quick variant must clear (the full demo's target: 0.25)


@pytest.fixture(scope="module")
def demo(hello_agents_100: Venv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo_agent_lookups") / "demo"
    hello_agents_100.run("-m", "hello_agents_rl.cli", "demo", "--task", "agent-lookups", "--quick", "--output-dir",
                         out, timeout=3600, env={"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_grpo_on_the_react_agent_raises_its_task_success_by_finishing_chains(demo: tuple[Path, dict]) -> None:
    _, results = demo
    sft, grpo = results["sft"], results["grpo"]
    assert results["agent"]["class"].endswith("ReActAgent") and {"lookup", "calculator"} <= set(results["agent"]["tools"])
    assert sft["num_questions"] == grpo["num_questions"] == results["recipe"]["eval_questions"]
    assert grpo["accuracy"] >= sft["accuracy"] + MARGIN, (sft, grpo)
    assert grpo["chain_completion_rate"] > sft["chain_completion_rate"], "the gain comes from finishing the chains"
    assert grpo["mean_calls"] > sft["mean_calls"]


@pytest.mark.slow
def test_every_call_of_the_served_agent_ran_its_own_tool(demo: tuple[Path, dict]) -> None:
    out, _ = demo
    rows = [json.loads(line) for line in (out / "grpo" / "agent_details.jsonl").read_text().splitlines()]
    calls = [call for row in rows for call in row["calls"]]
    assert {tool for tool, _, _ in calls} == {"lookup", "calculator"}
    for tool, argument, result in calls:  # what the Tool in the agent's registry returned for that very argument
        if tool == "lookup" and not result.startswith("error:"):
            assert result == lookups.lookup(argument)
    right = [row for row in rows if row["correct"]]
    whole = [row for row in right if lookups.chain_made(row["question"], {(t, a) for t, a, _ in row["calls"]})]
    assert right and len(whole) >= 0.9 * len(right), "right answers come from whole chains, not lucky guesses"
