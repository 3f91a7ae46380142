"""`evaluate` and `compare`, with or without tools: rollouts from the one loop (rollouts/loop.py), then the metrics.

Greedy accuracy, pass@k, format, length, numeric error and the book's error analysis, truncation, speed; with
`tools`/`environment` the same questions run the tool loop as in training, and the tool metrics join them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.config import CompareConfig, EvaluateConfig
from hello_agents_rl.data import sources as data_layer
from hello_agents_rl.evaluation.metrics import comparison_markdown, question_details, summarise
from hello_agents_rl.models import (
    load_model,
    load_tokenizer,
    recorded_prompt,
    system_prompt_of,
    with_recorded_prompt,
)
from hello_agents_rl.rollouts.loop import roll_out
from hello_agents_rl.rollouts.template import check_tool_template
from hello_agents_rl.rollouts.tool_guard import ToolStats
from hello_agents_rl.rollouts.tool_registry import resolve_environment, resolve_tools
from hello_agents_rl.trainers.tool_run import uses_tools


def evaluate_model(
    model: Any,
    tokenizer: Any,
    rows: Any,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    k: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    enable_thinking: bool = False,
    tools: list[Callable[..., Any]] | tuple = (),
    environment: type | None = None,
    max_tool_turns: int = 4,
    tool_timeout: float = 30.0,
    answer_checker: str = "number",
    task: Any = None,
) -> dict[str, Any]:
    """Metrics over rows with `prompt` (chat messages) and `ground_truth`; details per question, right or wrong
    as `answer_checker` says (the training reward's checker: rewards/checkers.py).

    `task` (tasks/): where it owns its reward, its verdict decides right and wrong. `accuracy` is always greedy. pass@1..k come from one set of k samples per question at `temperature`
    (1.0 when it is 0 and k > 1), by the unbiased estimator; without sampling, pass@1 is the greedy accuracy.
    With tools, `tool_stats` counts what the guards saw in the greedy rollouts (those the tool metrics describe).
    """
    with_tools = bool(tools) or environment is not None
    loop = dict(enable_thinking=enable_thinking, tools=tools, environment=environment, max_tool_turns=max_tool_turns)
    stats = ToolStats(timeout=tool_timeout)
    started = time.perf_counter()
    greedy = roll_out(model, tokenizer, rows, max_new_tokens, batch_size, seed=seed, stats=stats, **loop)
    sampling = k > 1 or temperature > 0
    sampled = (roll_out(model, tokenizer, rows, max_new_tokens, batch_size, temperature=temperature or 1.0, samples=k,
                        seed=seed + 1, stats=ToolStats(timeout=tool_timeout), **loop) if sampling else greedy)
    elapsed = time.perf_counter() - started
    details = [question_details(row, answer, samples, with_tools, answer_checker, task)
               for row, (answer,), samples in zip(rows, greedy, sampled)]
    result = summarise(details, k if sampling else 1, elapsed, with_tools)
    if sampling:
        result["sampling_temperature"] = temperature or 1.0
    if with_tools:
        result["tool_stats"] = stats.summary()
    return result


def evaluate_config(model: Any, tokenizer: Any, rows: Any, cfg: EvaluateConfig | CompareConfig) -> dict[str, Any]:
    """evaluate_model with the config's settings, its tools and environment resolved."""
    environment = resolve_environment(cfg.environment) if cfg.environment is not None else None
    return evaluate_model(model, tokenizer, rows, cfg.max_new_tokens, cfg.batch_size, cfg.k, cfg.temperature, cfg.seed,
                          cfg.enable_thinking, resolve_tools(cfg.tools), environment, cfg.max_tool_turns, cfg.tool_timeout,
                          cfg.answer_checker, cfg.task)


def _load_model(path: str, trust_remote_code: bool, key: str) -> Any:
    model = load_model(path, trust_remote_code, key=key)
    return model.to("cuda") if torch.cuda.is_available() else model


def run(cfg: EvaluateConfig) -> dict[str, Any]:
    """`action: evaluate`: the metrics; per-question details (transcripts with tools) to details_path."""
    cfg, prompt_source = with_recorded_prompt(cfg, cfg.model_path)  # the prompt the model was trained with
    rows = data_layer.load(cfg)
    warnings = [w for w in (agent_without_its_tools(cfg),) if w]
    for warning in warnings:
        print(f"[warning] {warning}", flush=True)  # before the model loads
    tokenizer = load_tokenizer(cfg.model_path, cfg.trust_remote_code, key="model_path")
    if uses_tools(cfg):
        check_tool_template(tokenizer, cfg.model_path)  # before the model loads
    model = _load_model(cfg.model_path, cfg.trust_remote_code, key="model_path")
    result = evaluate_config(model, tokenizer, rows, cfg)
    details = result.pop("details")
    if cfg.details_path:
        write_details(cfg.details_path, details)
    if cfg.return_details:
        result["details"] = details
    prompt = {"system_prompt": system_prompt_of(rows), "enable_thinking": cfg.enable_thinking, "source": prompt_source}
    return {"status": "completed", "model_path": cfg.model_path, "split": cfg.split, "prompt": prompt, **result,
            **({"warnings": warnings} if warnings else {})}


def agent_without_its_tools(cfg: EvaluateConfig) -> str | None:
    """A model trained as a hello-agents agent, evaluated with no tools: its answers are text the agent never sends
    (a Finish call read as text), so the score says nothing of the agent."""
    agent = (recorded_prompt(cfg.model_path) or {}).get("agent")
    if not agent or uses_tools(cfg):
        return None
    own = [name for name in agent["tools"] if name not in ("Thought", agent.get("finish_tool"))]
    other_way = ("" if agent.get("finish_tool") else  # evaluate's loop reads no Finish call as the answer
                 ", or give `tools` of the same names")
    return (f"{cfg.model_path} was trained as a {agent['class'].rsplit('.', 1)[-1]} with the tools "
            f"{', '.join(own)}; evaluated without them, its score is not the agent's. Score the agent with "
            f"`hello-agents-rl serve` of the model and agent.run(question){other_way}")


def write_details(path: str | Path, details: list[dict[str, Any]]) -> None:
    """One JSON object per question, its transcript included when it had tools (eval_details.jsonl)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(d, ensure_ascii=False, default=str) + "\n" for d in details), encoding="utf-8")


def compare(cfg: CompareConfig) -> dict[str, Any]:
    """`action: compare`: every model on the same questions, one row each (tool columns with tools), and where they
    disagree."""
    table, correct = [], {}
    # every model's path, tokenizer and tool template are checked before the first (long) evaluation starts
    tokenizers = {name: load_tokenizer(path, cfg.trust_remote_code, key=f"models.{name}") for name, path in cfg.models.items()}
    if uses_tools(cfg):
        for name, path in cfg.models.items():
            check_tool_template(tokenizers[name], path, key=f"models.{name}")
    for name, path in cfg.models.items():
        model_cfg, prompt_source = with_recorded_prompt(cfg, path)  # the same questions, each in its model's prompt
        rows = data_layer.load(model_cfg)
        model = _load_model(path, cfg.trust_remote_code, key=f"models.{name}")
        metrics = evaluate_config(model, tokenizers[name], rows, model_cfg)
        correct[name] = [d["correct"] for d in metrics.pop("details")]
        metrics.pop("tool_stats", None)
        prompt = {"system_prompt": system_prompt_of(rows), "source": prompt_source}
        table.append({"model": name, "path": path, "prompt": prompt, **metrics})
        del model
    names = list(cfg.models)
    disagreements = {
        f"{a} right, {b} wrong": [rows[i]["question"] for i in range(len(rows)) if correct[a][i] and not correct[b][i]]
        for a in names for b in names if a != b
    }
    markdown = comparison_markdown(table, cfg.k)
    if cfg.report_path:
        Path(cfg.report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.report_path).write_text(markdown, encoding="utf-8")
    print(markdown, flush=True)
    return {"status": "completed", "num_questions": len(rows), "table": table, "disagreements": disagreements,
            "markdown": markdown}
