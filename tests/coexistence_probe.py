"""Run inside a fresh virtual environment by test_coexistence.py: checks what a user of that environment sees.

    python coexistence_probe.py ours-alone | both | theirs-alone
Exits 0 and prints "ok: ..." when everything holds; raises AssertionError naming what did not.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import sys

REWARD_CALL = {"action": "create_reward", "reward_type": "accuracy",
               "completions": ["Final Answer: 72", "Final Answer: 70"], "ground_truth": 72}
BAD_CALL = {"action": "create_reward", "reward_typo": "accuracy", "completions": ["1"], "ground_truth": 1}


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def ours_alone() -> str:
    assert installed("hello-agents") is None and installed("hello-agents-rl")
    from hello_agents.tools import RLTrainingTool  # the book's line, hello-agents not installed

    import hello_agents_rl.interfaces.tool

    assert RLTrainingTool is hello_agents_rl.interfaces.tool.RLTrainingTool
    import hello_agents
    import hello_agents.tools

    assert hello_agents.IS_STANDIN and hello_agents.__version__.startswith("0.0.0+")  # says what it is
    assert "RLTrainingTool" in dir(hello_agents.tools)
    result = RLTrainingTool().run(REWARD_CALL)
    assert result["scores"] == [1.0, 0.0] and isinstance(result["scores"][0], float), result
    try:
        import hello_agents.agents  # the stand-in holds the tool and nothing else
    except ImportError:
        pass
    else:
        raise AssertionError("the stand-in pretends to be all of hello-agents")
    return "the book's line gives the plain tool; the stand-in holds nothing else"


def both() -> str:
    version = installed("hello-agents")
    assert version and installed("hello-agents-rl")
    import hello_agents
    from hello_agents.tools import CalculatorTool, RLTrainingTool, Tool, ToolParameter, ToolRegistry

    import hello_agents_rl.interfaces.tool

    assert hello_agents.__version__ == version and not hasattr(hello_agents, "IS_STANDIN")  # theirs, not a stand-in
    assert "RLTrainingTool" in dir(hello_agents.tools)
    assert issubclass(RLTrainingTool, Tool) and issubclass(RLTrainingTool, hello_agents_rl.interfaces.tool.RLTrainingTool)
    tool = RLTrainingTool()
    result = tool.run(REWARD_CALL)  # the book: a dict in, a dict of numbers out
    assert isinstance(result, dict) and result["scores"] == [1.0, 0.0], result
    params = tool.get_parameters()
    assert all(isinstance(p, ToolParameter) for p in params) and {"kl_coef", "use_lora"} <= {p.name for p in params}
    schema = tool.to_openai_schema()  # hello-agents' own function-calling export, built from get_parameters
    assert schema["function"]["name"] == "rl_training" and "kl_coef" in schema["function"]["parameters"]["properties"]

    registry = ToolRegistry()
    registry.register_tool(tool)
    registry.register_tool(CalculatorTool())
    good = registry.execute_tool("rl_training", json.dumps(REWARD_CALL))
    bad = registry.execute_tool("rl_training", json.dumps(BAD_CALL))
    calc = registry.execute_tool("python_calculator", "2+3")
    if version.startswith("0."):  # the registry speaks text
        assert isinstance(good, str) and json.loads(good)["scores"] == [1.0, 0.0], good
        assert json.loads(bad)["status"] == "error" and "reward_typo" in json.loads(bad)["message"], bad
        assert "5" in calc, calc
    else:  # 1.x: ToolResponse
        from hello_agents.tools import ToolStatus

        assert good.status == ToolStatus.SUCCESS and good.data["scores"] == [1.0, 0.0], good
        assert json.loads(good.text)["scores"] == [1.0, 0.0] and "time_ms" in good.stats
        assert bad.status == ToolStatus.ERROR and bad.error_info["code"] == "INVALID_PARAM", bad
        assert "reward_typo" in bad.text, bad.text
        assert calc.status == ToolStatus.SUCCESS and "5" in calc.text, calc
        import asyncio

        assert asyncio.run(tool.arun_with_timing(REWARD_CALL)).data["scores"] == [1.0, 0.0]
        # what an agent does with a model's tool call: arguments dict -> text for the next turn
        from hello_agents import HelloAgentsLLM, SimpleAgent

        llm = HelloAgentsLLM(model="m", api_key="none", base_url="http://127.0.0.1:9/v1")
        agent = SimpleAgent(name="trainer", llm=llm, tool_registry=registry)
        text = agent._execute_tool_call("rl_training", REWARD_CALL)
        assert json.loads(text)["scores"] == [1.0, 0.0], text
    return f"hello-agents {version}: a real Tool, registry and agents get what they expect"


def theirs_alone() -> str:
    version = installed("hello-agents")
    assert version and installed("hello-agents-rl") is None
    import hello_agents
    import hello_agents.tools as tools

    assert hello_agents.__version__ == version
    assert not any(f.__class__.__name__ == "BookImportFinder" for f in sys.meta_path)
    rl = getattr(tools, "RLTrainingTool", None)  # 0.2.x ships its own; 1.x has none
    assert (rl is None) if not version.startswith("0.") else rl.__module__.startswith("hello_agents.tools.builtin")
    registry = tools.ToolRegistry()
    registry.register_tool(tools.CalculatorTool())
    calc = registry.execute_tool("python_calculator", "2+3")
    assert "5" in (calc if isinstance(calc, str) else calc.text), calc
    return f"hello-agents {version} alone, untouched"


if __name__ == "__main__":
    print("ok:", {"ours-alone": ours_alone, "both": both, "theirs-alone": theirs_alone}[sys.argv[1]]())
