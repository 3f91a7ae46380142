"""`hello-agents-rl demo --task agent`: the reader's own hello-agents agent, trained with GRPO, then run for real.

The agent is a hello-agents `SimpleAgent` with one tool written with hello-agents' own API (a `Tool` subclass
whose `run` returns a `ToolResponse`): the exact calculator. The task, "What is A * B?" (A three digits, B two),
needs the tool. SFT imitates a demonstrator that calls the calculator on `tool_rate` of the questions and otherwise
answers from a flawed estimate, its transcripts rendered as the agent renders them (its system prompt, its tool
schema, the tool messages its own code makes); GRPO then trains the agent itself (`"agent": agent`). Both models
are scored by the real loop on held-out questions: `hello-agents-rl serve` of each model, and `agent.run(question)`
through `HelloAgentsLLM` against it, one fresh agent per question. Offline: the tiny model by default.

`--task agent-lookups` is the same loop over several steps: a hello-agents `ReActAgent` with two Tools of its own,
`lookup` and `calculator`, on the lookups task (tasks/lookups.py: chains of 2-4 dependent calls about entities the
held-out questions never share with training). SFT imitates a demonstrator that guesses or stops a chain one call
short, each transcript ending in the agent's own `Finish` call; GRPO trains the agent itself. Scored by
agent.run: task success, the share of questions whose every chain call was made, calls per question, failed calls.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.evaluation.stats import paired_gain
from hello_agents_rl.models.packaged import smollm2_gguf
from hello_agents_rl.rewards.correctness import is_correct
from hello_agents_rl.rollouts.agent_spec import AGENT_EXTRAS, agent_spec
from hello_agents_rl.rollouts.tool_registry import resolve_tools
from hello_agents_rl.tasks.lookups import Lookups
from hello_agents_rl.tasks.multiplication import Multiplication
from hello_agents_rl.workflows.demo_driver import drive, starting_model
from hello_agents_rl.workflows.demo_tool_use import FULL as TOOLS_FULL
from hello_agents_rl.workflows.demo_tool_use import (
    LOOKUPS,
    SMOLLM2_LOOKUPS,
    Recipe,
    grpo_settings,
    sft_settings,
    task_rows,
    task_tools,
)
from hello_agents_rl.workflows.demo_tool_use import SMOLLM2 as TOOLS_SMOLLM2
from hello_agents_rl.workflows.demos import AGENT, demo_name
from hello_agents_rl.workflows.serve import running, served_model_id

INSTALL = "pip install 'hello-agents-rl[agent]'"  # hello-agents 1.x: 1.0.0 on Python 3.10+, 1.0.1 on 3.12+
SYSTEM_PROMPT = "Multiply with the calculator. End with 'Final Answer: <number>'."
REACT_SYSTEM_PROMPT = "Answer with the tools, one call at a time. End by calling Finish with the number."


# The tool demo's recipe (workflows/demo_tool_use.py), trained on the agent; measured with
# benchmarks/demo_agent_seeds.py. The agent's own tool-turn limit replaces the recipe's max_tool_turns.
FULL = TOOLS_FULL
QUICK = replace(FULL, grpo_steps=20, eval_questions=60)  # CI: tests/test_demo_agent.py
SMOLLM2 = replace(TOOLS_SMOLLM2, eval_questions=100)
RECIPES = {("tiny", False): FULL, ("tiny", True): QUICK, ("smollm2", False): SMOLLM2,
           ("smollm2", True): replace(SMOLLM2, eval_questions=40)}
# The multi-step agent: the lookups demo's recipe (workflows/demo_tool_use.py) on a ReActAgent, its SFT at half the
# batch (docs/agentic.md: measured so).
# `--quick` trains as the full one (a shorter GRPO changes what is learnt) and asks 100 of the 250 held-out questions.
AGENT_LOOKUPS = replace(LOOKUPS, sft_steps=1200, sft_batch_size=16, sft_lr_scheduler="constant_with_warmup")
# SmolLM2: the plain lookups demo's SmolLM2 recipe as it is.
LOOKUP_RECIPES = {("tiny", False): AGENT_LOOKUPS, ("tiny", True): replace(AGENT_LOOKUPS, eval_questions=100),
                  ("smollm2", False): SMOLLM2_LOOKUPS, ("smollm2", True): replace(SMOLLM2_LOOKUPS, eval_questions=40)}
RECIPE_BOOKS = {Multiplication.name: RECIPES, Lookups.name: LOOKUP_RECIPES}


def hello_agents() -> Any:
    """The installed hello-agents package, or a ConfigError saying how to install it."""
    try:
        import hello_agents
        from hello_agents import SimpleAgent  # noqa: F401 - the stand-in of book_import.py has no agents
    except ImportError:
        raise ConfigError(f"`task`: the agent demo runs a hello-agents agent, and hello-agents is not installed. "
                          f"Fix: {INSTALL}") from None
    return hello_agents


def recorded_tool(name: str, description: str, parameter: str, example: str, compute: Callable[[str], str],
                  log: list[list[str]]) -> Any:
    """A hello-agents Tool written with its own API (a `Tool` subclass whose `run` returns a `ToolResponse`) over
    `compute`, one string parameter; each call is appended to `log` as [tool, argument, result or "error: ..."]."""
    from hello_agents.tools import Tool, ToolErrorCode, ToolParameter, ToolResponse

    class Recorded(Tool):
        def __init__(self) -> None:
            super().__init__(name=name, description=description)

        def get_parameters(self) -> list[Any]:
            return [ToolParameter(name=parameter, type="string", description=f'For example "{example}".')]

        def run(self, parameters: dict[str, Any]) -> Any:
            argument = str(parameters.get(parameter, ""))
            try:
                result = compute(argument)
            except ValueError as error:
                log.append([name, argument, f"error: {error}"])
                return ToolResponse.error(code=ToolErrorCode.INVALID_PARAM, message=str(error))
            log.append([name, argument, result])
            return ToolResponse.success(text=result)

    return Recorded()


EXAMPLES = {"expression": "347 * 56", "name": "P4821"}  # the example each Tool's parameter shows the model


def agent_tools(recipe: Recipe, log: list[list[str]]) -> list[Any]:
    """The demo agent's own Tools: one hello-agents Tool over each of the task's tools (the calculator; the
    lookups task's lookup first), its description the function's first docstring line."""
    tools = []
    for function in resolve_tools(task_tools(recipe)):
        (parameter,) = inspect.signature(function).parameters
        description = (function.__doc__ or "").strip().splitlines()[0]
        tools.append(recorded_tool(function.__name__, description, parameter, EXAMPLES.get(parameter, ""),
                                   function, log))
    return tools


def make_agent(folder: Path, recipe: Recipe, base_url: str = "http://127.0.0.1:9/v1",
               model: str = "served", max_tokens: int | None = None, log: list[list[str]] | None = None,
               max_tool_turns: int = 2, temperature: float = 0.0) -> Any:
    """The demo's agent, greedy unless `temperature` says otherwise: a SimpleAgent with the calculator
    (multiplication), or a ReActAgent with lookup and calculator (lookups), each with a short system prompt (the tiny
    model's context is small). Its LLM is only called by agent.run; training reads the agent and never calls it."""
    from hello_agents import HelloAgentsLLM, ReActAgent, SimpleAgent, ToolRegistry
    from hello_agents.core.config import Config

    registry = ToolRegistry()
    tools = agent_tools(recipe, [] if log is None else log)
    for tool in tools:
        registry.register_tool(tool)
    # its own tools alone: hello-agents 1.0.0's default Config adds four more tools and writes files
    extras_off = {k: False for k in AGENT_EXTRAS if k in Config.model_fields}  # the fields of this version
    config = Config(**extras_off, tool_output_dir=str(folder / "tool-output"))  # long tool outputs (none here)
    print(f"   the agent's Config: Config({', '.join(f'{k}=False' for k in extras_off)}): its own tools alone, "
          "no files written", flush=True)
    llm = HelloAgentsLLM(model=model, api_key="unused", base_url=base_url, temperature=temperature,
                          max_tokens=max_tokens)
    if len(tools) > 1:  # one tool: a SimpleAgent; several, a chain of calls: the ReAct loop, one call a step
        # 1.0.0 counts every model call a step (the Finish call too); 1.0.1 counts tool rounds
        limit = {"max_tool_iterations": max_tool_turns} if "max_tool_iterations" in inspect.signature(
            ReActAgent).parameters else {"max_steps": max_tool_turns + 1}
        return ReActAgent(name="lookup-agent", llm=llm, system_prompt=REACT_SYSTEM_PROMPT, config=config,
                          tool_registry=registry, **limit)
    return SimpleAgent(name="calculator-agent", llm=llm, system_prompt=SYSTEM_PROMPT, config=config,
                       tool_registry=registry)


class AgentLoop:
    """The agent's harness: GRPO trains the agent itself (`"agent": agent`); agent.run answers the held-out
    questions against `hello-agents-rl serve` of each model."""

    eval_lap = "agent_eval"
    outputs = "results.json, agent_details.jsonl (each answer and its tool calls), models and logs"

    def __init__(self, recipe: Recipe, package: Any) -> None:
        self.recipe, self.package = recipe, package
        self.name, self.demonstrator = demo_name(recipe.task, AGENT), recipe.task_of().demonstrator

    def introduce(self, out: Path) -> str:
        self.agent = make_agent(out, self.recipe, max_tool_turns=self.recipe.max_tool_turns)
        tools = ", ".join(t["function"]["name"] for t in agent_spec(self.agent).schemas)
        return (f"{self.recipe.model} model with a tool-calling chat template; hello-agents {self.package.__version__} "
                f"{type(self.agent).__name__} with its tools: {tools}")

    def start(self, out: Path, seed: int) -> Path:
        return starting_model(self.recipe, out, seed)

    def sft_params(self, start: str, out: Path, seed: int) -> dict[str, Any]:
        """Imitation of the demonstrator's transcripts as the agent renders them."""
        return _train(self.recipe, seed, self.agent) | sft_settings(self.recipe) | {
            "model_name": start, "output_dir": str(out), "dataset": demonstrations(self.agent, self.recipe, seed)}

    def grpo_params(self, sft_model: str, out: Path, seed: int) -> dict[str, Any]:
        """GRPO on the agent itself: its prompt, its tools, its turn limit."""
        recipe = self.recipe
        return _train(recipe, seed, self.agent) | grpo_settings(recipe) | {
            "model_name": sft_model, "output_dir": str(out),
            "dataset": task_rows(recipe, recipe.grpo_steps * recipe.grpo_batch_size, seed + 1)}

    def evaluation(self) -> str:
        return (f"the real agent loop: agent.run(question) against `hello-agents-rl serve` of each model, "
                f"{self.recipe.eval_questions} held-out questions")

    def evaluate(self, runs: dict[str, dict[str, Any]], out: Path, seed: int) -> dict[str, Any]:
        details = {name: run_agent(run["model_path"], self.recipe, out / name / "agent_details.jsonl")
                   for name, run in runs.items()}
        return {"hello_agents": self.package.__version__, "agent": runs["grpo"].get("prompt", {}).get("agent"),
                **{name: summary(rows, self.recipe) for name, rows in details.items()},
                "grpo_minus_sft": paired_gain(details["sft"], details["grpo"])}

    def report(self, out: Path, results: dict[str, Any]) -> None:
        """agent_details.jsonl holds each answer and its calls; no report.md."""

    def table(self, results: dict[str, Any]) -> str:
        return format_table(results)


def run_demo(output_dir: str | Path = "outputs/demo_agent", seed: int = 0, quick: bool = False,
             recipe: Recipe | None = None, model: str = "tiny", reuse: bool = False,
             task: str = Multiplication.name) -> dict[str, Any]:
    """Build, SFT, GRPO, then the real agent loop on each model (workflows/demo_driver.py). `reuse`: keep the SFT and
    GRPO runs this folder already completed from the same call and only run the agents again. `task`:
    multiplication (a SimpleAgent with a calculator) or lookups (a ReActAgent with lookup and calculator)."""
    package = hello_agents()  # before anything is built: without hello-agents, say how to install it
    recipe = recipe or RECIPE_BOOKS[task][(model, quick)]
    if recipe.model == "smollm2":
        smollm2_gguf()
    return drive(AgentLoop(recipe, package), output_dir, seed, quick, reuse)


def _train(recipe: Recipe, seed: int, agent: Any) -> dict[str, Any]:
    return {"action": "train", "agent": agent, "use_lora": recipe.use_lora, "seed": seed, "save_steps": 10_000,
            "logging_steps": recipe.logging_steps, "overwrite_output_dir": True, "report_to": "none"}


def demonstrations(agent: Any, recipe: Recipe, seed: int) -> Any:
    """The demonstrator's transcripts as the agent would have made them: each tool message the one the agent's own
    code makes for that call, and the final answer a `Finish` call where the agent ends that way (ReActAgent)."""
    spec = agent_spec(agent)
    rows = task_rows(recipe, recipe.sft_steps * recipe.sft_batch_size, seed)

    def as_agent(row: dict[str, Any]) -> dict[str, Any]:
        completion, last_calls = [], []
        for message in row["completion"]:
            if message["role"] == "tool":
                call = next(c for c in last_calls if c["function"]["name"] == message["name"])["function"]
                message = {**message, "content": spec.execute(call["name"], json.loads(call["arguments"]))}
            elif spec.finish_tool and not message.get("tool_calls"):  # "Final Answer: N" -> Finish(answer="N")
                answer = message["content"].removeprefix("Final Answer:").strip()
                message = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                    "name": spec.finish_tool, "arguments": json.dumps({"answer": answer})}}]}
            last_calls = message.get("tool_calls") or last_calls
            completion.append(message)
        return {"completion": completion}

    return rows.map(as_agent)


def held_out_rows(recipe: Recipe) -> Any:
    """The held-out questions the agents answer."""
    return recipe.task_of().rows("test", None, 0).select(range(recipe.eval_questions))


EVAL_CLIENTS = 16  # questions asked at once; the server decodes them as one batch (measured: docs/agentic.md)


def run_agent(model_path: str, recipe: Recipe, details_path: Path, clients: int = EVAL_CLIENTS
              ) -> list[dict[str, Any]]:
    """Each held-out question through agent.run against the served model, one fresh agent per question, `clients`
    questions at a time against a server that batches them; the records in question order, as one at a time."""
    with running(model_path, batching=clients > 1) as base_url:
        model = served_model_id(base_url)  # before any question: an agent whose calls fail is no measurement
        details = ask_all(base_url, model, list(held_out_rows(recipe)), recipe, details_path.parent, clients=clients)
    details_path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in details), encoding="utf-8")
    return details


def ask_all(base_url: str, model: str, rows: list[dict[str, Any]], recipe: Recipe, folder: Path,
            temperature: float = 0.0, clients: int = EVAL_CLIENTS) -> list[dict[str, Any]]:
    """ask_agent for every row, `clients` at a time, in the rows' order. hello-agents prints each tool it registers
    and each step: silenced once here, since redirecting stdout per thread would restore the wrong stream."""
    with contextlib.redirect_stdout(io.StringIO()), ThreadPoolExecutor(max(clients, 1)) as pool:
        return list(pool.map(lambda row: ask_agent(base_url, model, row, recipe, folder, temperature), rows))


def ask_agent(base_url: str, model: str, row: dict[str, Any], recipe: Recipe, folder: Path,
              temperature: float = 0.0) -> dict[str, Any]:
    """One question through a fresh agent's agent.run against the served model: its answer, whether it is right,
    the tool calls its Tools recorded, and the reason where the run failed (prints as the agent prints: ask_all
    silences them)."""
    calls: list[list[str]] = []
    agent = make_agent(folder, recipe, base_url, model, recipe.max_new_tokens, calls, recipe.max_tool_turns,
                       temperature)
    try:
        answer, error = agent.run(row["question"]), None
    except Exception as failure:  # noqa: BLE001 - a run that fails is a wrong answer, kept with its reason
        answer, error = "", f"{type(failure).__name__}: {failure}"
    return {"question": row["question"], "ground_truth": row["ground_truth"], "answer": answer,
            "correct": is_correct(answer, row["ground_truth"]), "calls": calls, "error": error}


def summary(details: list[dict[str, Any]], recipe: Recipe) -> dict[str, Any]:
    """Task success, the tool figures, and the task's own metrics (lookups: the share whose every chain call was
    made)."""
    n = max(len(details), 1)
    calls = [c for d in details for c in d["calls"]]
    figures = {"accuracy": sum(d["correct"] for d in details) / n,
               "tool_call_rate": sum(bool(d["calls"]) for d in details) / n,
               "mean_calls": len(calls) / n,
               "failed_call_rate": sum(result.startswith("error:") for _, _, result in calls) / max(len(calls), 1),
               "failed_runs": sum(d["error"] is not None for d in details), "num_questions": len(details)}
    return figures | recipe.task_of().metrics(details)


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'agent.run on held-out questions':<36}{'task success':>14}{'tool calls':>12}{'failed':>8}"]
    for key, name in (("sft", "SFT (imitation)"), ("grpo", "GRPO (RL on the agent)")):
        r = results[key]
        lines.append(f"{name:<36}{r['accuracy']:>14.1%}{r['tool_call_rate']:>12.1%}{r['failed_call_rate']:>8.1%}")
    gain = results["grpo_minus_sft"]
    lines.append(f"GRPO - SFT: {gain['points']:+.1f} points (95% paired interval {gain['interval'][0]:+.1f} to "
                 f"{gain['interval'][1]:+.1f}); wall time {results['wall_time_s']:.0f} s")
    return "\n".join(lines)
