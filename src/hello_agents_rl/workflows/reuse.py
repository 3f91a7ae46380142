"""`demo --reuse`: keep a training run only when everything it was made from is the same.

"Everything" is the whole call the demo makes, key by key, with what the call names by reference replaced by its
content: the rows by a hash of every row, an agent by its prompt, tool schemas and turn limit, and the starting
model by a hash of its files (a retrained SFT model in the same folder is another model). Nothing is listed by
hand, so a setting added to a recipe cannot be forgotten here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hello_agents_rl.outputs import atomic_write_json, completed_run, json_ready

MADE_FROM = "made_from.json"  # beside a demo's training run: made_from(its call)


def folder_hash(path: str | Path) -> str:
    """sha256 over a file's bytes, or over every file of a folder (relative paths and contents, in sorted order)."""
    root = Path(path)
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file())
    else:
        return f"absent: {root}"
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root) if root.is_dir() else file.name).encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _rows_hash(rows: Any) -> str:
    listed = rows.to_list() if hasattr(rows, "to_list") else rows  # a datasets.Dataset, or a list of rows
    return hashlib.sha256(json.dumps(json_ready(listed), sort_keys=True).encode()).hexdigest()


def _agent_content(agent: Any) -> dict[str, Any]:
    from hello_agents_rl.rollouts.agent_spec import agent_spec

    spec = agent_spec(agent)
    return {"type": spec.name, "system_prompt": getattr(agent, "system_prompt", None), "schemas": spec.schemas,
            "max_tool_turns": spec.max_tool_turns}


def made_from(params: dict[str, Any]) -> dict[str, Any]:
    """A training call as the content it names: every key as JSON, the rows, agent and starting model by content."""
    made = json_ready({key: value for key, value in params.items() if key not in ("dataset", "agent", "model_name")})
    if "dataset" in params:
        dataset = params["dataset"]
        made["dataset"] = dataset if isinstance(dataset, str) else {"rows_sha256": _rows_hash(dataset)}
    if params.get("agent") is not None:
        made["agent"] = json_ready(_agent_content(params["agent"]))
    if "model_name" in params:
        made["model_name"] = {"path": str(params["model_name"]), "sha256": folder_hash(params["model_name"])}
    return json.loads(json.dumps(made))  # as made_from.json reads back (integer keys become strings)


def reused_run(run: Path, made: dict[str, Any]) -> dict[str, Any] | None:
    """The run completed in `run` from exactly `made`, marked `reused`; None for any other (it says what differs)."""
    done = completed_run(run)
    if done is None:
        return None
    try:
        recorded = json.loads((run / MADE_FROM).read_text())
    except (OSError, ValueError):
        recorded = None
    if not isinstance(recorded, dict):
        print(f"   {run} has no record of what it was made from ({MADE_FROM}): training it again", flush=True)
        return None
    differ = sorted(key for key in made.keys() | recorded.keys() if made.get(key) != recorded.get(key))
    if differ:
        print(f"   {run} was made from another {', '.join(differ)}: training it again", flush=True)
        return None
    print(f"   reusing the completed run in {run}", flush=True)
    return done | {"reused": True}


def reuse_or_train(run: Path, params: dict[str, Any], reuse: bool, train: Callable[[dict[str, Any]], dict[str, Any]]
                   ) -> dict[str, Any]:
    """`train(params)` into `run`, or, with `reuse`, the run completed there from exactly the same (made_from)."""
    made = made_from(params)
    done = reused_run(run, made) if reuse else None
    if done is None:
        done = train(params)
        atomic_write_json(run / MADE_FROM, made)
    return done
