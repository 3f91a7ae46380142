"""Training a hello-agents agent itself (`agent` key), the parts that need no hello-agents installed.

What an installed hello-agents sends is checked against training in tests/test_agent_probe.py (1.0.0 and 1.0.1);
the whole loop, trained and served, in tests/test_demo_agent.py. Here: the refusals, the schemas reaching the chat
template as they are, a ReActAgent's Finish ending a rollout in TRL's own tool loop, and the chat template a tool
run saves beside its model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.interfaces.tool import RLTrainingTool
from hello_agents_rl.rollouts.agent_spec import AgentTool, agent_spec

SCHEMA = {"type": "function", "function": {"name": "lookup", "description": "Find a record.", "parameters": {
    "type": "object", "properties": {"query": {"type": "object", "description": "nested", "properties": {
        "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}},
    "required": ["query"]}}}


class ReActShaped:
    """An object with exactly the parts hello-agents 1.0.0's ReActAgent shows training (its real behaviour is
    checked in tests/test_agent_probe.py): Thought and Finish as built-in tools, one calculator tool."""

    _builtin_tools = {"Thought", "Finish"}
    max_steps = 3

    def __init__(self) -> None:
        self.tool_registry = type("Registry", (), {"get_all_tools": lambda self: [], "circuit_breaker": None})()
        self.executed: list[tuple[str, dict]] = []

    def run(self, question: str) -> str:
        raise AssertionError("training never runs the agent")

    def _build_messages(self, question: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": "Use calculator, then Finish."}, {"role": "user", "content": question}]

    def _build_tool_schemas(self) -> list[dict[str, Any]]:
        def schema(name: str, parameter: str) -> dict[str, Any]:
            return {"type": "function", "function": {"name": name, "description": name, "parameters": {
                "type": "object", "properties": {parameter: {"type": "string", "description": parameter}},
                "required": [parameter]}}}

        return [schema("Thought", "reasoning"), schema("Finish", "answer"), schema("calculator", "expression")]

    def _handle_builtin_tool(self, name: str, arguments: dict) -> dict[str, Any]:
        answer = arguments.get("answer", "")
        return {"content": f"最终答案: {answer}", "finished": True, "final_answer": answer} if name == "Finish" else {
            "content": f"推理: {arguments.get('reasoning', '')}", "finished": False}

    def _execute_tool_call(self, name: str, arguments: dict) -> str:
        self.executed.append((name, arguments))
        return str(eval(arguments["expression"], {"__builtins__": {}}))


def test_an_agent_of_another_shape_is_refused_naming_what_it_lacks(tmp_path: Path) -> None:
    class NotAnAgent:
        tool_registry = None

        def run(self, question: str) -> str:
            return ""

    with pytest.raises(ConfigError) as refused:
        RLTrainingTool().run({"action": "train", "algorithm": "grpo", "agent": NotAnAgent(),
                              "output_dir": str(tmp_path / "run")})  # the default model: a hub id, never loaded
    message = str(refused.value)
    assert "`agent`" in message and "NotAnAgent is not a hello-agents agent" in message
    for part in ("_build_messages", "_build_tool_schemas", "max_tool_iterations or max_steps", "_execute_tool_call"):
        assert part in message
    assert "no run " not in message and "no tool_registry" not in message  # it has those
    assert not (tmp_path / "run").exists()  # refused before anything was written or loaded


def test_agent_and_its_limit_keys_are_checked_together(tmp_path: Path) -> None:
    base = {"action": "train", "algorithm": "grpo", "agent": ReActShaped(),
            "output_dir": str(tmp_path / "run")}
    with pytest.raises(ConfigError, match="`tools`: the agent's tools are its tool_registry's"):
        RLTrainingTool().run({**base, "tools": [type("Tool", (), {"get_parameters": 0, "run_with_timing": 0})()]})
    with pytest.raises(ConfigError, match="`max_tool_turns`: 4, but the agent allows 2 tool rounds"):
        RLTrainingTool().run({**base, "max_tool_turns": 4})
    with pytest.raises(ConfigError, match="hello-agents Tools mixed with other tools"):
        RLTrainingTool().run({**{k: v for k, v in base.items() if k != "agent"},
                              "tools": ["calculator", type("Tool", (), {"get_parameters": 0, "run_with_timing": 0})()]})


@pytest.mark.parametrize("tools", [["calculator"], [lambda x: x], ["math:sqrt"]])
def test_an_agent_refuses_every_form_of_tools(tools: list, tmp_path: Path) -> None:
    """Built-in names and functions beside an agent used to be dropped without a word."""
    with pytest.raises(ConfigError, match="`tools`: the agent's tools are its tool_registry's"):
        RLTrainingTool().run({"action": "train", "algorithm": "grpo", "agent": ReActShaped(), "tools": tools,
                              "output_dir": str(tmp_path / "run")})


@pytest.mark.parametrize(("limit", "value", "needs"), [("max_steps", 1, 2), ("max_steps", 0, 2),
                                                        ("max_tool_iterations", 0, 1)])
def test_an_agent_that_never_calls_a_tool_is_refused(limit: str, value: int, needs: int, tmp_path: Path) -> None:
    agent = ReActShaped()
    if limit == "max_tool_iterations":  # SimpleAgent's name for it
        agent.max_tool_iterations = value
    else:
        agent.max_steps = value
    with pytest.raises(ConfigError, match=rf"`agent`: the agent never calls a tool \({limit}={value}.*at least {needs}"):
        RLTrainingTool().run({"action": "train", "algorithm": "grpo", "agent": agent,
                              "output_dir": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists()


def test_two_hello_agents_tools_with_one_name_are_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry keeps the second of two same-named tools: one would never be called."""
    import types

    from hello_agents_rl.rollouts import agent_spec as spec_module

    class Registry:
        def __init__(self) -> None:
            self.tools: dict[str, Any] = {}

        def register_tool(self, tool: Any) -> None:
            self.tools[tool.name] = tool

    monkeypatch.setitem(sys.modules, "hello_agents", types.SimpleNamespace(ToolRegistry=Registry))
    first = type("Calculator", (), {"name": "calc"})()
    second = type("OtherCalculator", (), {"name": "calc"})()
    with pytest.raises(ConfigError, match=r"two tools are named 'calc' \(.*Calculator and .*OtherCalculator\)"):
        spec_module._registry_of([first, second])


def test_an_agents_schema_reaches_the_chat_template_as_it_is() -> None:
    """A nested schema the agent sends is rendered unchanged (no conversion to a Python function and back), and TRL
    finds the tool by its name."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    template = "{{ tools | tojson }}"
    tool = AgentTool(SCHEMA, lambda **arguments: json.dumps(arguments))
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "q"}], tools=[tool], chat_template=template,
                                             tokenize=False)
    assert json.loads(rendered) == [SCHEMA]
    assert tool.__name__ == "lookup" and tool(query={"id": 1}) == '{"query": {"id": 1}}'


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    return str(build_tiny_tool_model(tmp_path_factory.mktemp("tiny_tools") / "model", seed=0))


@pytest.mark.slow
def test_a_finish_call_ends_the_rollout_and_its_answer_is_rewarded(tool_model: str, tmp_path: Path) -> None:
    """TRL's own tool loop with the agent's tools: the calculator runs the agent's way, Finish ends the rollout
    (no tool result after it, no further turn), and the reward reads Finish's answer."""
    from datasets import Dataset

    from hello_agents_rl.models import load_model, load_tokenizer
    from hello_agents_rl.trainers.agent_run import with_agent_prompts
    from hello_agents_rl.trainers.build import build_trainer
    from hello_agents_rl.trainers.tool_run import trajectory_reward
    from hello_agents_rl.workflows.actions import parse

    agent = ReActShaped()
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": "What is 347 * 56?"}]] * 2,
                              "ground_truth": ["19432"] * 2})
    cfg = parse({"action": "train", "algorithm": "grpo", "model_name": tool_model, "dataset": rows, "agent": agent,
                 "output_dir": str(tmp_path / "run"), "batch_size": 1, "num_generations": 2, "max_new_tokens": 200,
                 "use_lora": False, "report_to": "none", "kl_coef": 0.0})
    assert cfg.max_tool_turns == 2  # ReActAgent 1.0.0: max_steps calls, so max_steps - 1 rounds reach the model
    spec = agent_spec(agent)
    rows = with_agent_prompts(rows, spec)
    tokenizer = load_tokenizer(tool_model)
    trainer = build_trainer(cfg, load_model(tool_model), tokenizer, rows, None, trajectory_reward(cfg, spec), [],
                            "cpu", False, spec=spec)
    call = '<tool_call>\n{"name": "%s", "arguments": {"%s": "%s"}}\n</tool_call><|im_end|>'
    turns = iter([call % ("calculator", "expression", "347 * 56"), call % ("Finish", "answer", "20820"),
                  call % ("Finish", "answer", "19432"), "never asked"])
    trainer._generate_single_turn = lambda prompt_ids, *args, **kwargs: (
        [tokenizer(next(turns), add_special_tokens=False)["input_ids"] for _ in prompt_ids], None)
    batch = trainer._generate_and_score_completions([{"prompt": rows[0]["prompt"], "ground_truth": "19432"}] * 2)
    assert next(turns) == "never asked"  # after Finish, no rollout was continued
    assert agent.executed == [("calculator", {"expression": "347 * 56"})]
    # rollout 0: calculator, then Finish 19432 (right); rollout 1: Finish 20820 at once (wrong)
    assert batch["advantages"].tolist() == [0.5, -0.5]
    texts = [tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])]
    assert texts[0].count("<tool_call>") == 2 and "<tool_response>\n19432" in texts[0]
    assert texts[1].count("<tool_call>") == 1
    for text in texts:  # each ends on its Finish call
        assert text.rsplit("<tool_call>", 1)[1].startswith('\n{"name": "Finish"') and text.endswith("<|im_end|>")
    assert "最终答案" not in "".join(texts)  # Finish's own result is never appended


@pytest.mark.slow
def test_a_tool_run_saves_the_chat_template_it_trained_with(tool_model: str, tmp_path: Path) -> None:
    """Where TRL swaps the model's template for its training template (Qwen3's is not prefix-preserving), the saved
    model carries the training one, so `serve` renders conversations as training did."""
    import importlib.resources

    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    model = tmp_path / "qwen3-template"
    tokenizer = AutoTokenizer.from_pretrained(tool_model)
    tokenizer.chat_template = importlib.resources.files("trl").joinpath("chat_templates/qwen3.jinja").read_text()
    del tokenizer.response_template  # TRL picks Qwen3's parser for this template
    training = get_training_chat_template(tokenizer)
    assert training and training != tokenizer.chat_template
    tokenizer.save_pretrained(model)
    for file in Path(tool_model).iterdir():
        if not (model / file.name).exists():
            (model / file.name).symlink_to(file)
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": str(model), "output_dir": str(tmp_path / "run"),
        "dataset": "multiplication", "max_samples": 2, "max_steps": 1, "batch_size": 1, "num_generations": 2,
        "max_new_tokens": 8, "tools": ["calculator"], "use_lora": False, "report_to": "none"})
    assert result["status"] == "completed"
    assert AutoTokenizer.from_pretrained(result["model_path"]).chat_template == training


def test_the_agent_demo_says_how_to_install_hello_agents(tmp_path: Path) -> None:
    """Without hello-agents (this environment has the book_import stand-in only), nothing is built."""
    done = subprocess.run([sys.executable, "-m", "hello_agents_rl.cli", "demo", "--task", "agent", "--output-dir",
                           str(tmp_path / "demo")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "pip install 'hello-agents-rl[agent]'" in done.stderr + done.stdout
    assert not (tmp_path / "demo").exists()


@pytest.mark.slow
def test_the_served_model_answers_to_any_name(tool_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the server is pinned to the resolved folder; a client sending the relative path, or the docs' "m", used to get
    # HTTP 400 on every call, which hello-agents swallows (the agent answers nothing)
    import os
    import urllib.request

    from hello_agents_rl.workflows.serve import running, served_model_id

    monkeypatch.chdir(Path(tool_model).parent)
    relative = os.path.relpath(tool_model)
    with running(relative) as base_url:
        assert served_model_id(base_url) == str(Path(tool_model).resolve())
        for name in (relative, "m"):
            body = json.dumps({"model": name, "messages": [{"role": "user", "content": "1"}], "max_tokens": 1})
            request = urllib.request.Request(f"{base_url}/chat/completions", body.encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as reply:
                assert reply.status == 200 and json.loads(reply.read())["choices"], name


def test_an_agent_setup_unlike_the_starting_models_is_named() -> None:
    """hello-agents 1.0.0's default Config adds Skill, Task, TodoWrite and DevLog: a model SFT-trained with the
    calculator alone then sees five tools, and its reward stays 0 with no word of why."""
    from hello_agents_rl.trainers.agent_run import mismatch

    trained = {"system_prompt": "Multiply with the calculator.", "agent": {"tools": ["calculator"]}}
    same = {"system_prompt": "Multiply with the calculator.", "agent": {"tools": ["calculator"]}}
    extra = {"system_prompt": "You are helpful.", "agent": {"tools": ["calculator", "Skill", "Task"]}}
    assert mismatch(trained, same) is None and mismatch(None, extra) is None
    said = mismatch(trained, extra)
    assert "tools ['calculator'] then, ['calculator', 'Skill', 'Task'] now (new: Skill, Task)" in said
    assert "system prompt 'Multiply with the calculator.' then, 'You are helpful.' now" in said
    assert "docs/agentic.md" in said


def test_an_agent_named_on_the_command_line_is_refused_with_the_python_way_and_the_cli_way(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hello_agents_rl.interfaces.cli import main

    with pytest.raises(SystemExit) as refused:
        main(["train", "--agent", "mytools:make_agent", "--output_dir", str(tmp_path / "run")])
    assert refused.value.code != 0 and "`agent`: 'mytools:make_agent' is text" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"`agent`: 'mytools:make_agent' is text.*\"agent\": agent.*`tools`"):
        RLTrainingTool().run({"action": "train", "agent": "mytools:make_agent", "output_dir": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists()


def test_an_agent_whose_config_adds_hello_agents_own_tools_is_named_before_training() -> None:
    agent = ReActShaped()
    assert agent_spec(agent).extras_on == []  # no Config: nothing added
    agent.config = type("Config", (), {"skills_enabled": True, "todowrite_enabled": True, "trace_enabled": False})()
    assert agent_spec(agent).extras_on == ["skills_enabled", "todowrite_enabled"]
    agent.config.session_enabled = True
    warning = agent_spec(agent).extras_warning()
    assert "skills_enabled, todowrite_enabled register hello-agents' own tools beside yours" in warning
    assert "session_enabled write files" in warning
    assert warning.endswith("Config(skills_enabled=False, todowrite_enabled=False, session_enabled=False) keeps your "
                            "tools alone")
