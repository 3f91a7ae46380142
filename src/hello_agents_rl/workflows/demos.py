"""The demos, one table: `demo --task NAME` -> its task, its harness and the module whose `run_demo` runs it.

The harnesses: a plain answer (the addition demo), the plain tool loop (TRL's, in training and evaluation), and the
reader's own hello-agents agent (trained with `"agent": agent`, scored by agent.run against the served model).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from hello_agents_rl.tasks.arithmetic import Arithmetic
from hello_agents_rl.tasks.lookups import Lookups
from hello_agents_rl.tasks.multiplication import Multiplication

ANSWER, TOOL_LOOP, AGENT = "answer", "tool loop", "agent"


@dataclass(frozen=True)
class Demo:
    task: str  # the task's name (tasks/)
    harness: str  # ANSWER, TOOL_LOOP or AGENT
    module: str  # hello_agents_rl.workflows.<module>.run_demo runs it
    help: str


DEMOS = {
    "addition": Demo(Arithmetic.name, ANSWER, "demo", "RL beyond imperfect demonstrations"),
    "tools": Demo(Multiplication.name, TOOL_LOOP, "demo_tool_use", "RL learns to call the calculator"),
    Lookups.name: Demo(Lookups.name, TOOL_LOOP, "demo_tool_use", "RL learns to follow a chain of 2-4 dependent "
                       "tool calls"),
    "agent": Demo(Multiplication.name, AGENT, "demo_agent", "a hello-agents agent trained with GRPO, then run on the "
                  "served model"),
    f"agent-{Lookups.name}": Demo(Lookups.name, AGENT, "demo_agent", "a hello-agents ReActAgent with two tools of its "
                                  "own, on the lookups chains"),
}


def demo_name(task: str, harness: str) -> str:
    """The name `demo --task` gives the demo of `task` through `harness` (results.json records it): the user's own
    task is named by its import string."""
    return next((name for name, demo in DEMOS.items() if demo.task == task and demo.harness == harness), task)


def default_folder(name: str, model: str) -> str:
    """Each demo's own folder; a SmolLM2 run's beside the tiny model's."""
    real = model == "smollm2"
    if name == "addition":
        return "outputs/demo_real" if real else "outputs/demo"
    return f"outputs/demo_{re.sub(r'[^A-Za-z0-9]+', '_', name)}" + ("_real" if real else "")


def run_named(name: str, output_dir: str | None, seed: int, quick: bool, model: str, reuse: bool) -> dict[str, Any]:
    """Run the demo `name` (a key of DEMOS, or 'my_module:MyTask': the user's own task in the tool loop) in
    `output_dir`, or in its own folder where that is None."""
    demo = DEMOS.get(name) or Demo(name, TOOL_LOOP, "demo_tool_use", "your own task")
    run_demo = importlib.import_module(f"hello_agents_rl.workflows.{demo.module}").run_demo
    folder = output_dir or default_folder(name, model)
    if demo.harness == ANSWER:
        return run_demo(folder, seed=seed, quick=quick, model=model)
    return run_demo(folder, seed=seed, quick=quick, model=model, reuse=reuse, task=demo.task)
