"""What a hello-agents agent sends equals what training renders, for hello-agents 1.0.0 and 1.0.1.

tests/agent_probe.py runs inside an environment with that hello-agents: a stub OpenAI server records every request
a SimpleAgent and a ReActAgent make (a calculator call, a failing call, an answer or Finish), and the same agent is
read as training reads it. The system message, the tool schemas and the tool messages must be equal; the failing
call is counted failed from its ToolResponse; the answer training rewards is the one agent.run returns. With 1.0.0
(Python 3.11, beside this project's packages) the texts are also rendered: the last request as `transformers serve`
renders it and training's own token concatenation must be the same text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SRC, Venv, run_command

PROBE = Path(__file__).with_name("agent_probe.py")


def _check(out: dict, version: str, kind: str) -> None:
    requests = out["requests"]
    assert len(requests) == 3  # two tool rounds, then the answer (SimpleAgent) or Finish (ReActAgent)
    assert requests[0]["messages"] == out["prompt"]  # system message and question, as training's prompt
    for request in requests:
        assert request["tools"] == out["tools"]  # the schemas, exactly as the agent's own code built them
        assert request["tool_choice"] == "auto"  # what `hello-agents-rl serve` honours
    sent = [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert sent == out["tool_messages"] and sent[0] == "19432" and "INVALID_PARAM" in sent[1]
    assert out["failed"] == [False, True]  # counted from the ToolResponse status, not from the text
    assert out["answer"] == out["run_answer"]  # what agent.run returns is what the reward reads
    digits = next(t for t in out["tools"] if t["function"]["name"] == "calculator")["function"]["parameters"][
        "properties"]["digits"]
    # each version writes a default its own way; training sends whichever the installed one builds
    assert digits.get("default") == 0 if version == "1.0.0" else "(默认: 0)" in digits["description"]
    names = [t["function"]["name"] for t in out["tools"]]
    assert ("Finish" in names) == (kind == "react")
    assert out["max_tool_turns"] == {("1.0.0", "simple"): 3, ("1.0.0", "react"): 4, ("1.0.1", "simple"): 3,
                                     ("1.0.1", "react"): 5}[(version, kind)]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models.tiny_tool_model import tool_tokenizer

    folder = tmp_path_factory.mktemp("tool_tokenizer")
    tool_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["simple", "react"])
def test_hello_agents_100_sends_what_training_renders(kind: str, hello_agents_100: Venv, tokenizer_dir: str) -> None:
    out = json.loads(hello_agents_100.run(PROBE, kind, "--render", tokenizer_dir,
                                          env={"PYTHONPATH": str(SRC)}).strip().splitlines()[-1])
    _check(out, "1.0.0", kind)
    assert out["rendered"]["served"] == out["rendered"]["trained"]
    assert "❌ 错误 [INVALID_PARAM]" in out["rendered"]["trained"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["simple", "react"])
def test_hello_agents_101_sends_what_training_renders(kind: str, hello_agents_101: Path, tmp_path: Path) -> None:
    out = json.loads(run_command(hello_agents_101, PROBE, kind, cwd=tmp_path,
                                 env={"PYTHONPATH": str(SRC)}).strip().splitlines()[-1])
    _check(out, "1.0.1", kind)


TOOLS_RUN = """
import json, sys
from hello_agents import ToolRegistry
from hello_agents_rl.interfaces.tool import RLTrainingTool  # (this environment has no book_import hook)
from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
from agent_probe import Calculator

model, out = sys.argv[1], sys.argv[2]
registry = ToolRegistry(); registry.register_tool(Calculator())
common = {"model_name": str(build_tiny_tool_model(model)), "dataset": "multiplication", "max_samples": 2,
          "max_new_tokens": 24, "system_prompt": "Use the calculator."}
train = RLTrainingTool().run({"action": "train", "algorithm": "grpo", "tools": [registry], "output_dir": out,
    "max_steps": 1, "batch_size": 1, "num_generations": 2, "use_lora": False, "report_to": "none", **common})
evaluation = RLTrainingTool().run({"action": "evaluate", "model_path": train["model_path"], "tools": [Calculator()],
                                   "return_details": True, **{k: v for k, v in common.items() if k != "model_name"}})
print(json.dumps({"status": train["status"], "agent": train["prompt"].get("agent"), "system": train["prompt"]["system_prompt"],
                  "max_tool_turns": train["config"]["max_tool_turns"], "questions": evaluation["num_questions"]}))
"""


@pytest.mark.slow
def test_hello_agents_tools_and_registries_train_and_evaluate(hello_agents_100: Venv, tmp_path: Path) -> None:
    """`tools` takes a ToolRegistry or hello-agents Tools: they run the way a SimpleAgent runs them; the prompts stay
    the dataset's, with the run's system prompt."""
    out = json.loads(hello_agents_100.run("-c", TOOLS_RUN, tmp_path / "model", tmp_path / "run", timeout=900,
                                          env={"PYTHONPATH": f"{SRC}:{PROBE.parent}"}).strip().splitlines()[-1])
    assert out["status"] == "completed" and out["system"] == "Use the calculator."
    assert out["agent"]["tools"] == ["calculator"] and out["max_tool_turns"] == 3  # SimpleAgent's limit
    assert out["questions"] == 2
