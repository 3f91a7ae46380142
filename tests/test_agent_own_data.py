"""A reader's own multi-tool agent on their own questions file, as docs/agentic.md shows it: a hello-agents 1.0.0
ReActAgent with two Tools the test writes (`find_order`, `stock_of`; the answer needs both, the second's argument
read from the first's result), SFT on the file's transcripts, GRPO on its questions with a combined accuracy + step
reward, then `agent.run` against `hello-agents-rl serve` of the trained model. The file's `completion` column is
what SFT imitates; here its tool calls carry their arguments as JSON objects, as a person writes them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import SRC, Venv

from hello_agents_rl import ConfigError
from hello_agents_rl.tasks.custom import load_file

RUN = """
import json, sys
from pathlib import Path
from hello_agents import HelloAgentsLLM, ReActAgent, ToolRegistry
from hello_agents.core.config import Config
from hello_agents.tools import Tool, ToolErrorCode, ToolParameter, ToolResponse
from hello_agents_rl.interfaces.tool import RLTrainingTool
from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
from hello_agents_rl.workflows.serve import running, served_model_id

ORDERS = {"4471": "W2", "5180": "W1", "6032": "W3", "7315": "W2", "8124": "W1", "9267": "W3"}
STOCK = {"W1": 128, "W2": 312, "W3": 57}
calls = []  # every call the agent's own Tools ran: (tool, argument)


class FindOrder(Tool):
    def __init__(self):
        super().__init__(name="find_order", description="Which warehouse holds an order.")

    def get_parameters(self):
        return [ToolParameter(name="order", type="string", description="The order number, e.g. 4471.")]

    def run(self, parameters):
        order = str(parameters.get("order", "")); calls.append(("find_order", order))
        if order not in ORDERS:
            return ToolResponse.error(code=ToolErrorCode.INVALID_PARAM, message=f"no order {order}")
        return ToolResponse.success(text=f"Order {order} is in warehouse {ORDERS[order]}.")


class StockOf(Tool):
    def __init__(self):
        super().__init__(name="stock_of", description="Items left in a warehouse.")

    def get_parameters(self):
        return [ToolParameter(name="warehouse", type="string", description="The warehouse, e.g. W2.")]

    def run(self, parameters):
        warehouse = str(parameters.get("warehouse", "")); calls.append(("stock_of", warehouse))
        if warehouse not in STOCK:
            return ToolResponse.error(code=ToolErrorCode.INVALID_PARAM, message=f"no warehouse {warehouse}")
        return ToolResponse.success(text=f"{warehouse} has {STOCK[warehouse]} items left.")


def agent(base_url="http://127.0.0.1:9/v1", model="m"):
    registry = ToolRegistry(); registry.register_tool(FindOrder()); registry.register_tool(StockOf())
    config = Config(skills_enabled=False, subagent_enabled=False, todowrite_enabled=False, devlog_enabled=False,
                    session_enabled=False, trace_enabled=False, tool_output_dir=str(out / "tool-output"))
    llm = HelloAgentsLLM(model=model, api_key="unused", base_url=base_url, temperature=0, max_tokens=120)
    return ReActAgent(name="orders", llm=llm, system_prompt="Answer with the tools.", config=config,
                      tool_registry=registry, max_steps=4)


def call(name, **arguments):
    return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}


out = Path(sys.argv[1])
questions = out / "orders.jsonl"
with questions.open("w") as file:
    for order, warehouse in ORDERS.items():
        left = STOCK[warehouse]
        file.write(json.dumps({"question": f"How many items are left in the warehouse that holds order {order}?",
                               "answer": str(left), "completion": [
            call("find_order", order=order),
            {"role": "tool", "name": "find_order", "content": f"Order {order} is in warehouse {warehouse}."},
            call("stock_of", warehouse=warehouse),
            {"role": "tool", "name": "stock_of", "content": f"{warehouse} has {left} items left."},
            call("Finish", answer=str(left))]}) + "\\n")

documented = json.loads(sys.argv[2])  # docs/agentic.md's own SFT and GRPO settings
common = {"action": "train", "dataset": str(questions), "report_to": "none", "seed": 0}
sft = RLTrainingTool().run({**common, **documented["sft"], "agent": agent(), "output_dir": str(out / "sft"),
                            "model_name": str(build_tiny_tool_model(out / "tiny")), "logging_steps": 50})
calls.clear()
grpo = RLTrainingTool().run({**common, **documented["grpo"], "agent": agent(), "output_dir": str(out / "grpo"),
                             "model_name": sft["model_path"], "max_steps": 2, "batch_size": 4, "num_generations": 4})
trained_calls, calls[:] = sorted(set(calls)), []
with running(grpo["model_path"]) as base_url:
    answer = agent(base_url, served_model_id(base_url)).run("How many items are left in the warehouse that holds order 4471?")
print(json.dumps({"sft": sft["status"], "grpo": grpo["status"], "reward": grpo["average_reward"], "tools": grpo["tools"],
                  "agent": grpo["prompt"]["agent"], "trained_calls": trained_calls, "answer": answer, "run_calls": calls}))
"""


def documented_settings() -> dict[str, dict]:
    """The settings docs/agentic.md's own-agent example trains with, by algorithm: every key whose value is written
    out (not the agent, not the paths), so the example in the docs is the one this test trains."""
    text = (SRC.parent / "docs" / "agentic.md").read_text(encoding="utf-8")
    section = text[text.index("### Your own questions, tools and agent"):]
    code = section[section.index("```python") + len("```python"):]
    settings = {}
    for node in ast.walk(ast.parse(code[:code.index("```")])):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Dict):
            pairs = {key.value: value for key, value in zip(node.args[0].keys, node.args[0].values)
                     if isinstance(key, ast.Constant)}
            if "algorithm" in pairs:
                settings[ast.literal_eval(pairs["algorithm"])] = {
                    key: ast.literal_eval(value) for key, value in pairs.items()
                    if key not in {"model_name", "dataset", "output_dir"} and not isinstance(value, ast.Name)}
    return settings


def test_the_documented_own_agent_example_is_complete() -> None:
    """A reader copies the block as it is: its Tool classes and imports are in it (they were only in this test)."""
    from test_quick_start import undefined_names

    text = (SRC.parent / "docs" / "agentic.md").read_text(encoding="utf-8")
    section = text[text.index("### Your own questions, tools and agent"):]
    code = section[section.index("```python") + len("```python"):]
    assert undefined_names(code[:code.index("```")]) == []


def test_the_documented_own_agent_example_names_the_settings_this_test_trains_with() -> None:
    settings = documented_settings()
    assert set(settings) == {"sft", "grpo"}
    # from random weights the tiny model learns only with full fine-tuning at a high rate for enough steps
    assert settings["sft"]["use_lora"] is False and settings["sft"]["max_steps"] >= 100
    assert settings["grpo"]["reward_type"] == "combined"


@pytest.mark.slow
def test_a_react_agent_with_two_tools_of_its_own_trains_on_a_questions_file(hello_agents_100: Venv,
                                                                           tmp_path: Path) -> None:
    out = json.loads(hello_agents_100.run("-c", RUN, tmp_path, json.dumps(documented_settings()), timeout=1200, env={
        "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}).strip().splitlines()[-1])
    assert out["sft"] == out["grpo"] == "completed"
    assert out["agent"]["class"].endswith("ReActAgent") and {"find_order", "stock_of"} <= set(out["agent"]["tools"])
    # GRPO's rollouts ran the test's own Tool objects, each of the two, through the agent's registry
    assert {tool for tool, _ in out["trained_calls"]} == {"find_order", "stock_of"}
    assert out["tools"]["calls"] > 0 and out["tools"]["failures"] == 0
    by_tool = out["tools"]["calls_by_tool"]  # the agent's Finish is a call too; each counted under its own name
    assert {"find_order", "stock_of", "Finish"} <= set(by_tool) and sum(by_tool.values()) == out["tools"]["calls"]
    assert out["reward"] > 1.0, "right answers (1.0) and the step reward's credit for their grounded calls (0.1 each)"
    # the served model, in the agent's own loop: both lookups, the second from the first's result, then Finish
    assert out["run_calls"] == [["find_order", "4471"], ["stock_of", "W2"]] and out["answer"] == "312"


def test_a_questions_files_completion_is_what_sft_imitates(tmp_path: Path) -> None:
    call = {"function": {"name": "find_order", "arguments": {"order": "4471"}}}
    other = {"function": {"name": "stock_of", "arguments": {"warehouse": "W2"}}}
    rows = [{"question": "Where is order 4471?", "answer": "2", "completion": [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "name": "find_order", "content": "W2"},
                {"role": "assistant", "content": "Final Answer: 2"}]},
            {"question": "Stock of W2?", "answer": "312", "completion": [
                {"role": "assistant", "tool_calls": [other]}, {"role": "tool", "content": "312"},
                {"role": "assistant", "content": "Final Answer: 312"}]},
            {"question": "1 + 1?", "answer": "2"}]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_file(str(path), "question", "answer", None)
    first, second, plain = data["completion"]
    assert [m["role"] for m in first] == ["assistant", "tool", "assistant"] and first[1]["content"] == "W2"
    # each call's arguments exactly as written: no key of the other tool's call, set to null
    assert json.loads(first[0]["tool_calls"][0]["function"]["arguments"]) == {"order": "4471"}
    assert json.loads(second[0]["tool_calls"][0]["function"]["arguments"]) == {"warehouse": "W2"}
    assert [(m["role"], m["content"], m["tool_calls"]) for m in plain] == [("assistant", "Final Answer: 2", None)]


@pytest.mark.parametrize("completion, error", [
    ({"role": "assistant"}, "`completion` is dict"),
    ([{"role": "user", "content": "hi"}], "message 0 is not an assistant or tool message"),
    ([{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}], "tool call without a name"),
])
def test_a_malformed_completion_names_its_row(completion: object, error: str, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "1 + 1?", "answer": "2"}) + "\n"
                    + json.dumps({"question": "2 + 2?", "answer": "4", "completion": completion}) + "\n")
    with pytest.raises(ConfigError, match=rf"q.jsonl:2: .*{error}"):
        load_file(str(path), "question", "answer", None)


def test_a_transcript_calling_a_tool_the_run_lacks_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    model = build_tiny_tool_model(tmp_path / "model")
    typo = {"function": {"name": "calculater", "arguments": {"expression": "2 * 3"}}}
    rows = [{"question": "What is 2 * 3?", "answer": "6", "completion": [
        {"role": "assistant", "tool_calls": [typo]}, {"role": "tool", "content": "6"},
        {"role": "assistant", "content": "Final Answer: 6"}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"row 1's transcript calls 'calculater', which is not one of the run's tools "
                                          r"\(calculator\)"):
        RLTrainingTool().run({"action": "train", "algorithm": "sft", "model_name": str(model), "tools": ["calculator"],
                              "dataset": str(tmp_path / "q.jsonl"), "output_dir": str(tmp_path / "run"),
                              "use_lora": False})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("arguments, error", [
    ({"expr": "2 * 3"}, r"calls 'calculator' with 'expr', which it does not take \(it takes: expression\)"),
    ({}, r"calls 'calculator' without 'expression', which it requires"),
])
def test_a_transcript_call_with_arguments_its_tool_does_not_take_is_refused_before_the_model_loads(
        arguments: dict, error: str, tmp_path: Path) -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    call = {"function": {"name": "calculator", "arguments": arguments}}
    rows = [{"question": "What is 2 * 3?", "answer": "6", "completion": [
        {"role": "assistant", "tool_calls": [call]}, {"role": "tool", "content": "6"},
        {"role": "assistant", "content": "Final Answer: 6"}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=rf"`dataset`: row 1's transcript {error}; write the call with the tool's"):
        RLTrainingTool().run({"action": "train", "algorithm": "sft", "model_name": str(build_tiny_tool_model(tmp_path / "m")),
                              "tools": ["calculator"], "dataset": str(tmp_path / "q.jsonl"),
                              "output_dir": str(tmp_path / "run"), "use_lora": False})
    assert not (tmp_path / "run").exists()


def test_evaluating_an_agent_trained_model_without_its_tools_warns_that_the_score_is_not_the_agents(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models import save_prompt_settings
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    model = build_tiny_tool_model(tmp_path / "m")
    save_prompt_settings(model, {"system_prompt": None, "agent": {
        "class": "hello_agents.agents.react_agent.ReActAgent", "tools": ["Thought", "Finish", "find_order"],
        "max_tool_turns": 3, "finish_tool": "Finish"}})
    params = {"action": "evaluate", "model_path": str(model), "dataset": "multiplication", "max_samples": 2,
              "max_new_tokens": 4, "tools": []}  # the task's calculator left out too
    result = RLTrainingTool().run(params)
    (warning,) = result["warnings"]
    assert "trained as a ReActAgent with the tools find_order; evaluated without them" in warning
    assert warning.endswith("agent.run(question)"), "no `tools` can stand in for a ReActAgent's Finish"
    assert warning in capsys.readouterr().out
    assert "warnings" not in RLTrainingTool().run({**params, "tools": ["calculator"], "max_tool_turns": 1})


def test_a_chain_budget_shorter_than_the_transcripts_is_named_before_the_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    def row(calls: int) -> dict:
        completion = []
        for i in range(calls):
            completion += [{"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "calculator", "arguments": {"expression": f"{i} + 1"}}}]},
                {"role": "tool", "name": "calculator", "content": str(i + 1)}]
        return {"question": "Count up.", "answer": str(calls), "completion": [
            *completion, {"role": "assistant", "content": f"Final Answer: {calls}"}]}

    model = str(build_tiny_tool_model(tmp_path / "m"))
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(row(n)) + "\n" for n in (1, 1, 3, 3)))
    params = {"action": "train", "algorithm": "grpo", "model_name": model, "tools": ["calculator"],
              "max_tool_turns": 3, "dataset": str(tmp_path / "mixed.jsonl"), "output_dir": str(tmp_path / "run"),
              "use_lora": False, "max_steps": 1, "batch_size": 2, "num_generations": 2, "report_to": "none"}
    result = RLTrainingTool().run({**params, "max_new_tokens": 40})
    out = capsys.readouterr().out
    warning = out[out.index("[warning] max_new_tokens (40)"):].splitlines()[0]
    assert warning.removeprefix("[warning] ") in result["diagnostics"]  # and kept with the run
    assert "every one of the dataset's transcripts (the first 4 rows) take more" in warning
    assert out.index("[warning] max_new_tokens") < out.index("Step 1/1"), "said before training"
    RLTrainingTool().run({**params, "max_new_tokens": 90, "output_dir": str(tmp_path / "run2")})
    assert "[warning] max_new_tokens (90) is the budget of a whole chain" in (out := capsys.readouterr().out)
    assert "2 of 4 of the dataset's transcripts" in out
    longest = int(warning.rsplit("raise max_new_tokens to ", 1)[1])
    RLTrainingTool().run({**params, "max_new_tokens": longest, "output_dir": str(tmp_path / "run3")})
    assert "[warning] max_new_tokens" not in capsys.readouterr().out
