"""Every demo's calls, as hashes of every key and row: SFT, GRPO and evaluation of the addition, tools and lookups
demos, and each agent demo's agent (class, tool schemas, prompt, turn limit) and its held-out questions and
demonstrations. Equal output on two commits means the demos train and score exactly as they did.

    python benchmarks/demo_calls.py > new.json     # hello-agents installed: the agent demos too
    git worktree add /tmp/old <commit> && PYTHONPATH=/tmp/old/src python benchmarks/demo_calls.py > old.json
    python benchmarks/demo_calls.py --diff old.json new.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def calls(folder: Path) -> dict[str, Any]:
    from hello_agents_rl.data import sources
    from hello_agents_rl.workflows import actions, demo
    from hello_agents_rl.workflows import demo_tool_use as tools_demo
    from hello_agents_rl.workflows.reuse import made_from

    model = folder / "model"
    model.mkdir()
    (model / "weights").write_text("one starting model for every call")
    seen: list[dict[str, Any]] = []

    def stage(params: dict[str, Any], *_: Any, **__: Any) -> dict[str, Any]:
        seen.append(made_from({k: v for k, v in params.items() if k != "output_dir"}))
        return {"model_path": str(model), "train_runtime_s": 0, "num_steps": 0}

    def evaluate(params: dict[str, Any]) -> dict[str, Any]:
        params = {k: v for k, v in params.items() if k != "details_path"}
        seen.append({**params, "rows": _hash(sources.load(actions.parse(params)).to_list())})
        return {"details": []}

    demo.run_stage, demo.actions.run, tools_demo.actions.run = stage, evaluate, evaluate
    out: dict[str, Any] = {}
    for seed in (0, 1):
        for quick in (True, False):
            recipe, seen[:] = demo.RECIPES[("tiny", quick)], []
            demo.train_sft(str(model), folder / "o", recipe, seed)
            demo.train_grpo(str(model), folder / "o", recipe, seed)
            demo.evaluate(str(model), recipe, seed)
            out[f"addition quick={quick} seed={seed}"] = list(seen)
            out[f"addition demonstrator seed={seed} quick={quick}"] = demo.demonstrator_accuracy(seed, recipe.carry_error)
    books = {"tools": tools_demo.RECIPES, "lookups": tools_demo.LOOKUP_RECIPES}
    for name, book in books.items():
        for key, recipe in book.items():
            for seed in (0, 1):
                seen[:] = []
                tools_demo.evaluate(str(model), recipe, seed, folder / "details.jsonl")
                out[f"{name} {key} seed={seed}"] = {
                    stage_name: made_from({k: v for k, v in fn(str(model), folder / "o", recipe, seed).items()
                                           if k != "output_dir"})
                    for stage_name, fn in (("sft", tools_demo.sft_params), ("grpo", tools_demo.grpo_params))
                } | {"evaluate": seen[0]}
    out |= agent_calls(folder)
    return out


def agent_calls(folder: Path) -> dict[str, Any]:
    """The agent demos' agents, held-out questions and demonstrations (needs hello-agents)."""
    try:
        from hello_agents_rl.rollouts.agent_spec import agent_spec
        from hello_agents_rl.workflows import demo_agent
        demo_agent.hello_agents()
    except Exception:  # noqa: BLE001 - without hello-agents the agent demos are left out, and said so
        return {"agent demos": "left out: hello-agents is not installed"}
    out: dict[str, Any] = {}
    books = {"agent": demo_agent.RECIPES, "agent-lookups": demo_agent.LOOKUP_RECIPES}
    by_recipe = "recipe" in inspect.signature(demo_agent.make_agent).parameters
    for name, book in books.items():
        for key, recipe in book.items():
            with contextlib.redirect_stdout(io.StringIO()):
                agent = demo_agent.make_agent(folder, recipe if by_recipe else recipe.task,
                                              max_tool_turns=recipe.max_tool_turns)
                spec = agent_spec(agent)
                demos = demo_agent.demonstrations(agent, recipe, 0).select(range(64)).to_list()
            held_out = [(r["question"], r["ground_truth"], r["prompt"]) for r in demo_agent.held_out_rows(recipe)]
            out[f"{name} {key}"] = {"class": type(agent).__name__, "schemas": _hash(spec.schemas),
                                    "turns": spec.max_tool_turns, "demonstrations": _hash(demos),
                                    "held_out": _hash(held_out)}
    return out


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [f"{key}:\n  old {json.dumps(old.get(key), default=str)[:400]}\n  new "
            f"{json.dumps(new.get(key), default=str)[:400]}" for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--diff", nargs=2, metavar=("OLD", "NEW"), help="compare two outputs of this script")
    args = parser.parse_args()
    if args.diff:
        old, new = (json.loads(Path(p).read_text()) for p in args.diff)
        found = diff(old, new)
        print("\n".join(found) if found else f"identical: {len(new)} demo calls")
        return
    folder = Path(tempfile.gettempdir()) / "hello_agents_rl_demo_calls"  # one path: the calls name their model's
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        print(json.dumps(calls(folder), sort_keys=True, indent=1, default=str))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
