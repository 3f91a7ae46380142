"""The four stages every demo runs, written once over (task x harness): build the starting model, SFT on the
task's demonstrator, GRPO rewarded for the right final answer, then both models on the held-out questions.

A harness says what differs: a plain answer (workflows/demo.py, the addition demo), the plain tool loop
(workflows/demo_tool_use.py: TRL's loop in training, `evaluate`'s in scoring) or the reader's hello-agents agent
(workflows/demo_agent.py: trained with `"agent": agent`, scored by agent.run against the served model). Each stage stops on an interrupt and resumes on a rerun
(workflows/stages.py); `reuse` keeps a run made from exactly the same call (workflows/reuse.py).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from hello_agents_rl.models.packaged import smollm2_tool_model
from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
from hello_agents_rl.outputs import RESULTS, atomic_write_json
from hello_agents_rl.workflows.clock import Clock
from hello_agents_rl.workflows.reuse import reuse_or_train
from hello_agents_rl.workflows.stages import run_stage, start_or_resume


class Harness(Protocol):
    """What one demo's harness brings to the four stages."""

    recipe: Any  # the demo's Recipe dataclass
    name: str  # `demo --task NAME`
    eval_lap: str  # the evaluation's name in results.json's `seconds`
    outputs: str  # what the demo's folder holds, as the last line says
    demonstrator: str  # what SFT's demonstrator does

    def introduce(self, out: Path) -> str: ...  # stage 1's line, after what it prepares (an agent)

    def start(self, out: Path, seed: int) -> Path: ...  # the model SFT starts from

    def sft_params(self, start: str, out: Path, seed: int) -> dict[str, Any]: ...

    def grpo_params(self, sft_model: str, out: Path, seed: int) -> dict[str, Any]: ...

    def evaluation(self) -> str: ...  # stage 4's line

    def evaluate(self, runs: dict[str, dict[str, Any]], out: Path, seed: int) -> dict[str, Any]: ...

    def report(self, out: Path, results: dict[str, Any]) -> None: ...  # report.md and plots, where it writes them

    def table(self, results: dict[str, Any]) -> str: ...


def drive(harness: Harness, output_dir: str | Path, seed: int, quick: bool, reuse: bool) -> dict[str, Any]:
    """The four stages; results.json: the harness's figures, the training record and the cost of each stage."""
    recipe = harness.recipe
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    resume = start_or_resume(out, {"demo": harness.name, "seed": seed, "recipe": asdict(recipe)})
    clock = Clock()
    print(f"== 1/4 {harness.introduce(out)}", flush=True)
    start = harness.start(out, seed)
    clock.lap("build")
    print(f"== 2/4 SFT on the transcripts of a demonstrator that {harness.demonstrator}", flush=True)
    sft = reuse_or_train(out / "sft", harness.sft_params(str(start), out / "sft", seed), reuse,
                         lambda params: run_stage(params, "SFT", resume))
    clock.lap("sft")
    print("== 3/4 GRPO from the SFT model, rewarded only for the right final answer", flush=True)
    grpo = reuse_or_train(out / "grpo", harness.grpo_params(sft["model_path"], out / "grpo", seed), reuse,
                          lambda params: run_stage(params, "GRPO", resume))
    clock.lap("grpo")
    print(f"== 4/4 {harness.evaluation()}", flush=True)
    figures = harness.evaluate({"sft": sft, "grpo": grpo}, out, seed)
    clock.lap(harness.eval_lap)
    results = {"task": harness.name, "seed": seed, "quick": quick, **training_record(sft, grpo), **figures,
               "recipe": asdict(recipe), "wall_time_s": clock.total()}
    harness.report(out, results)
    clock.lap("report")
    results |= {"seconds": clock.laps, "cpu_seconds": clock.cpu_laps, "wall_time_s": clock.total(),
                "cpu_time_s": clock.cpu_total()}  # everything, the report included: the demo's own cost
    atomic_write_json(out / RESULTS, results)
    print(harness.table(results), flush=True)
    print(f"{harness.outputs} in {out}", flush=True)
    return results


def starting_model(recipe: Any, out: Path, seed: int) -> Path:
    """The model SFT starts from, built (tiny) or unpacked (SmolLM2) under `out`."""
    if recipe.model == "smollm2":
        return smollm2_tool_model(out / "smollm2")
    corpus = recipe.task_of().tokenizer_corpus()
    if corpus:  # a tokenizer that merges the task's text as well
        return build_tiny_tool_model(out / "tiny", seed=seed, corpus=corpus, vocab_size=800)
    return build_tiny_tool_model(out / "tiny", seed=seed)


def training_record(sft: dict[str, Any], grpo: dict[str, Any]) -> dict[str, Any]:
    """What a demo keeps of its two training runs, by phase: which it reused, and the wall and CPU seconds each run
    recorded of itself (kept through a reuse, where the demo's own laps are not)."""
    runs = (("sft", sft), ("grpo", grpo))
    return {"reused_training": [name for name, run in runs if run.get("reused")],
            "train_runtime_s": {name: run.get("train_runtime_s") for name, run in runs},
            "train_cpu_s": {name: run.get("train_cpu_s") for name, run in runs}}
