"""The quick agent demo end to end, as a user runs it: `hello-agents-rl demo --task agent --quick` in an
environment with hello-agents 1.0.0. A SimpleAgent with a calculator Tool is trained (SFT, then GRPO on the agent
itself), each model is served by `hello-agents-rl serve`, and `agent.run(question)` answers held-out questions
through HelloAgentsLLM against it; the calculator calls go through the agent's own registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SRC, Venv

MARGIN = 0.15  # GRPO - SFT task success, the floor this quick variant must clear (the full demo's target is 0.30)


@pytest.fixture(scope="module")
def demo(hello_agents_100: Venv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo_agent") / "demo"
    hello_agents_100.run("-m", "hello_agents_rl.cli", "demo", "--task", "agent", "--quick", "--output-dir", out,
                         timeout=1800, env={"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_grpo_on_the_agent_raises_its_task_success(demo: tuple[Path, dict]) -> None:
    _, results = demo
    sft, grpo = results["sft"], results["grpo"]
    assert results["hello_agents"] == "1.0.0" and results["agent"]["class"].endswith("SimpleAgent")
    assert sft["num_questions"] == grpo["num_questions"] == 60
    assert grpo["accuracy"] >= sft["accuracy"] + MARGIN, (sft, grpo)
    assert grpo["tool_call_rate"] > sft["tool_call_rate"], "the gain comes from calling the tool"
    paired = results["grpo_minus_sft"]
    assert paired["questions"] == 60 and abs(paired["points"] - 100 * (grpo["accuracy"] - sft["accuracy"])) <= 0.1


@pytest.mark.slow
def test_the_served_agent_calls_its_tool_through_its_registry(demo: tuple[Path, dict]) -> None:
    out, _ = demo
    rows = [json.loads(line) for line in (out / "grpo" / "agent_details.jsonl").read_text().splitlines()]
    called = [r for r in rows if r["calls"]]
    assert called, "no agent.run called the calculator"
    for row in called:  # what the Tool object in the agent's registry computed, for this very question
        tool, expression, result = row["calls"][0]
        assert tool == "calculator"
        a, b = row["question"].removeprefix("What is ").removesuffix("?").split(" * ")
        if expression.replace(" ", "") == f"{a}*{b}":
            assert result == str(int(a) * int(b))
    right = [r for r in called if r["correct"]]
    assert right and all(r["ground_truth"] in r["answer"] for r in right)


@pytest.mark.slow
def test_the_model_is_served_with_the_template_it_was_trained_with(demo: tuple[Path, dict]) -> None:
    """The tiny model's template is prefix-preserving, so TRL trained with it as it is: the saved one is the same;
    a forced tool_choice, which `transformers serve` would ignore, is refused with a 400 naming it."""
    import urllib.error
    import urllib.request

    from transformers import AutoTokenizer

    from hello_agents_rl.rollouts.template import TINY_TOOL_CHAT_TEMPLATE
    from hello_agents_rl.workflows.serve import running

    out, results = demo
    model = out / "grpo" / "model"
    assert AutoTokenizer.from_pretrained(model).chat_template == TINY_TOOL_CHAT_TEMPLATE
    prompt = json.loads((model / "prompt_settings.json").read_text())
    assert prompt["agent"]["tools"] == ["calculator"] and prompt["system_prompt"].startswith("Multiply")
    tools = [{"type": "function", "function": {"name": "calculator", "description": "d", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
    with running(str(model)) as base_url:
        def ask(choice: object) -> tuple[int, dict]:
            body = {"model": str(model), "max_tokens": 40, "temperature": 0, "tools": tools, "tool_choice": choice,
                    "messages": [{"role": "system", "content": prompt["system_prompt"]},
                                 {"role": "user", "content": "What is 347 * 56?"}]}
            request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    return reply.status, json.loads(reply.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        status, refused = ask("required")
        assert status == 400 and "tool_choice 'required' is not supported" in json.dumps(refused)
        status, answered = ask("auto")
        assert status == 200 and answered["choices"][0]["message"]["tool_calls"], answered
