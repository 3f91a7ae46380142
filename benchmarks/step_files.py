"""Which of the package's files one agent GRPO step runs: from `RLTrainingTool().run` of a hello-agents ReActAgent
(the lookups agent demo's, on the tiny tool model) to its return after one optimizer step. Every function of the
package called, in any thread, counts its file (a module imported and never called does not); the lines are those
files' lines. Needs hello-agents.

    python benchmarks/step_files.py [--list] [--json FILE] [--record]

--record writes docs/step_files.json and the `step-files` block of docs/design.md from it.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any


def files_run(call: Any) -> set[str]:
    """The package's files whose functions ran while `call()` ran."""
    import hello_agents_rl

    package = str(Path(hello_agents_rl.__file__).parent)
    seen: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name != "<module>" and frame.f_code.co_filename.startswith(package):
            seen.add(frame.f_code.co_filename)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return {str(Path(f).relative_to(package)) for f in seen}


def one_agent_step(folder: Path) -> dict[str, Any]:
    from hello_agents_rl.interfaces.tool import RLTrainingTool  # the book's class, as hello_agents.tools gives it
    from hello_agents_rl.workflows import demo_agent
    from hello_agents_rl.workflows.demo_driver import starting_model

    recipe = replace(demo_agent.LOOKUP_RECIPES[("tiny", True)], grpo_batch_size=2, num_generations=2,
                     max_new_tokens=48)
    with contextlib.redirect_stdout(io.StringIO()):
        by_recipe = "recipe" in inspect.signature(demo_agent.make_agent).parameters
        agent = demo_agent.make_agent(folder, recipe if by_recipe else recipe.task, max_tool_turns=recipe.max_tool_turns)
        model = starting_model(recipe, folder, 0)
        rows = demo_agent.task_rows(recipe, 4, 1)
    params = {"action": "train", "algorithm": "grpo", "agent": agent, "model_name": str(model), "dataset": rows,
              "output_dir": str(folder / "grpo"), "max_steps": 1, "batch_size": 2, "num_generations": 2,
              "max_new_tokens": 48, "use_lora": False, "report_to": "none", "save_steps": 100, "logging_steps": 1,
              "reward_type": "accuracy"}
    result: dict[str, Any] = {}
    files = files_run(lambda: result.update(RLTrainingTool().run(params)))
    assert result.get("status") == "completed", result
    return {"files": sorted(files)}


RECORD = Path(__file__).resolve().parents[1] / "docs" / "step_files.json"


def render_readme(record: dict[str, Any]) -> str:
    """The docs/design.md block: the count, and the files by folder."""
    by_folder: dict[str, list[str]] = {}
    for name in record["files"]:
        folder, _, file = name.rpartition("/")
        by_folder.setdefault(folder or ".", []).append(file)
    lines = [f"One agent GRPO step calls into **{record['count']} of the package's files** ({record['lines']:,} "
             f"lines), measured by `{record['command']}`:", ""]
    lines += [f"- `{folder}/`: {', '.join(files)}" for folder, files in sorted(by_folder.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print each file and its lines")
    parser.add_argument("--json", help="write the files and counts here")
    parser.add_argument("--record", action="store_true", help="write docs/step_files.json and docs/design.md's block")
    args = parser.parse_args()
    import hello_agents_rl

    package = Path(hello_agents_rl.__file__).parent
    with tempfile.TemporaryDirectory() as folder:
        found = one_agent_step(Path(folder))
    lines = {f: len((package / f).read_text(encoding="utf-8").splitlines()) for f in found["files"]}
    if args.list:
        for name, count in lines.items():
            print(f"{count:5d}  {name}")
    print(f"one agent GRPO step runs {len(lines)} of the package's files, {sum(lines.values())} lines")
    record = {"files": lines, "count": len(lines), "lines": sum(lines.values()),
              "command": "python benchmarks/step_files.py --record"}
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    if args.record:
        from readme_blocks import write_from_record

        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        write_from_record("step-files", render_readme, RECORD)


if __name__ == "__main__":
    main()
