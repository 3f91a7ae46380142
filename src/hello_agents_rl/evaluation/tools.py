"""Evaluation with tools, batched and greedy, the way TRL's training rollouts run.

Per question: the prompt rendered with the tools (TRL's `apply_chat_template(..., tools=...)`), a greedy
turn, TRL's `parse_response` to read tool calls, the guarded tools run, their results appended with
TRL's own `_get_tool_suffix_ids` (token concatenation, no re-tokenisation), and the next turn -- at most
`max_tool_turns` tool rounds and `max_new_tokens` tokens for the whole trajectory, as in training.
The answer is read after the last tool result (`rewards.read_trajectory`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch

from hello_agents_rl.rollouts.trajectory import read_trajectory
from hello_agents_rl.rollouts.tools import ToolStats, guard, guarded_environment, public_methods, resolve_environment, resolve_tools
from hello_agents_rl.rewards import extract_answer, follows_format, parse_ground_truth


@dataclass
class Rollout:
    ids: list[int]  # prompt + everything so far (model tokens and tool results)
    prompt_len: int
    tools: dict[str, Callable[..., Any]]
    schemas: list[Any]
    messages: list[dict[str, Any]] = field(default_factory=list)
    model_tokens: int = 0
    done: bool = False
    truncated: bool = False


def _tools_for_rows(rows: Any, tools: list[Callable[..., Any]], environment: type | None, stats: ToolStats) -> tuple[list, list]:
    """Per row: the tool callables by name and the schemas rendered in its prompt; environments reset with the row."""
    per_row, prompts = [], []
    env_class = guarded_environment(environment, stats) if environment is not None else None
    for row in rows:
        prompt = [dict(m) for m in row["prompt"]]
        callables = list(tools)
        if env_class is not None:
            instance = env_class()
            observation = instance.reset(**row)
            if isinstance(observation, str):
                prompt[-1]["content"] = prompt[-1]["content"] + observation
            callables += [getattr(instance, name) for name in public_methods(env_class)]
        per_row.append(callables)
        prompts.append(prompt)
    return per_row, prompts


def _suffix_ids(tokenizer: Any, chat_template: str | None, kwargs: dict, tool_messages: list[dict]) -> list[int]:
    """TRL's own tool-result tokens (GRPOTrainer._get_tool_suffix_ids) on a stand-in for the trainer."""
    from trl import GRPOTrainer

    shim = SimpleNamespace(processing_class=tokenizer, _tokenizer=tokenizer, chat_template=chat_template,
                           chat_template_kwargs=kwargs, _is_vlm=False)
    return GRPOTrainer._get_tool_suffix_ids(shim, tool_messages)


@torch.no_grad()
def _greedy(model: Any, tokenizer: Any, sequences: list[list[int]], max_new_tokens: int, eos_ids: set[int]) -> list[list[int]]:
    """One greedy turn for each sequence (left padding); each output ends at its first EOS (kept)."""
    device = next(model.parameters()).device
    width = max(map(len, sequences))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], device=device)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=device)
    output = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                            pad_token_id=pad, top_k=None, top_p=None, temperature=None)
    turns = []
    for row in output[:, width:].tolist():
        end = next((i for i, t in enumerate(row) if t in eos_ids), None)
        turns.append(row if end is None else row[: end + 1])
    return turns


def run_rollouts(
    model: Any,
    tokenizer: Any,
    rows: Any,
    tools: list[Callable[..., Any]],
    environment: type | None = None,
    max_new_tokens: int = 256,
    max_tool_turns: int = 4,
    batch_size: int = 32,
    enable_thinking: bool = False,
    stats: ToolStats | None = None,
) -> list[Rollout]:
    from trl.chat_template_utils import (
        add_response_schema, get_training_chat_template, is_chat_template_prefix_preserving, parse_response,
    )

    stats = stats or ToolStats()
    guarded = [guard(t, stats) for t in tools]
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
    kwargs = {"enable_thinking": enable_thinking}
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    per_row, prompts = _tools_for_rows(rows, guarded, environment, stats)
    rollouts = []
    for callables, prompt in zip(per_row, prompts):
        ids = tokenizer.apply_chat_template(prompt, tools=callables or None, chat_template=template,
                                            add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs)
        rollouts.append(Rollout(list(ids), len(ids), {c.__name__: c for c in callables}, callables))
    model.eval()
    for turn in range(max_tool_turns + 1):
        active = [r for r in rollouts if not r.done]
        for start in range(0, len(active), batch_size):
            batch = active[start : start + batch_size]
            budget = max(max_new_tokens - min(len(r.ids) - r.prompt_len for r in batch), 1)
            for r, new in zip(batch, _greedy(model, tokenizer, [r.ids for r in batch], budget, eos_ids)):
                new = new[: max(max_new_tokens - (len(r.ids) - r.prompt_len), 0)]  # the trajectory's budget
                message = parse_response(tokenizer, new, prefix=r.ids, tools=r.schemas) if new else {"role": "assistant", "content": ""}
                r.messages.append(message)
                r.ids += new
                r.model_tokens += len(new)
                r.truncated = not new or new[-1] not in eos_ids
                if not message.get("tool_calls") or turn == max_tool_turns or r.truncated:
                    r.done = True  # an answer, the last allowed round, or out of budget
                    continue
                results = [_call(r.tools, call) for call in message["tool_calls"]]
                suffix = _suffix_ids(tokenizer, template, kwargs, results)
                if len(r.ids) + len(suffix) - r.prompt_len > max_new_tokens:
                    r.done = True  # TRL drops a tool result that would overflow the budget, and stops
                    continue
                r.messages += results
                r.ids += suffix
    return rollouts


def _call(tools: dict[str, Callable[..., Any]], call: dict[str, Any]) -> dict[str, Any]:
    """Run one parsed call the way TRL's loop does: any exception becomes an {'error': ...} tool message."""
    function = call.get("function", {})
    name = function.get("name", "unknown")
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        result = tools[name](**(function.get("arguments") or {}))
    except Exception as error:  # noqa: BLE001 - a failed call, as in training
        result = {"error": str(error)}
    return {"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)}


def evaluate_with_tools(
    model: Any,
    tokenizer: Any,
    rows: Any,
    tools: list[Callable[..., Any]],
    environment: type | None = None,
    max_new_tokens: int = 256,
    max_tool_turns: int = 4,
    batch_size: int = 32,
    enable_thinking: bool = False,
) -> dict[str, Any]:
    """Accuracy, tool-call rate, failed-call rate, calls per question, share out of turns; details per question."""
    started = time.perf_counter()
    stats = ToolStats()
    rollouts = run_rollouts(model, tokenizer, rows, tools, environment, max_new_tokens, max_tool_turns, batch_size,
                            enable_thinking, stats)
    elapsed = time.perf_counter() - started
    details = []
    for row, r in zip(rows, rollouts):
        trajectory = read_trajectory(r.messages)
        predicted, truth = extract_answer(trajectory.final_text), parse_ground_truth(row["ground_truth"])
        details.append({
            "question": row.get("question", ""),
            "ground_truth": row["ground_truth"],
            "transcript": r.messages,
            "final_text": trajectory.final_text,
            "predicted": None if predicted is None else str(predicted),
            "correct": predicted is not None and predicted == truth,
            "follows_format": follows_format(trajectory.final_text),
            **trajectory.stats(),
            "num_tokens": r.model_tokens,
            "truncated": r.truncated,
        })
    return {**summarise(details, elapsed), "tool_stats": stats.summary(), "details": details}


def summarise(details: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    n = max(len(details), 1)
    calls = sum(d["calls"] for d in details)
    return {
        "num_questions": len(details),
        "accuracy": sum(d["correct"] for d in details) / n,
        "format_rate": sum(d["follows_format"] for d in details) / n,
        "tool_call_rate": sum(d["calls"] > 0 for d in details) / n,
        "failed_call_rate": sum(d["failed_calls"] for d in details) / calls if calls else 0.0,
        "mean_calls": calls / n,
        "turns_exhausted_rate": sum(d["turns_exhausted"] for d in details) / n,
        "mean_tokens": sum(d["num_tokens"] for d in details) / n,
        "truncation_rate": sum(d["truncated"] for d in details) / n,
        "seconds_per_question": elapsed / n,
    }


def load_for_eval(path: str, trust_remote_code: bool) -> tuple[Any, Any]:
    from hello_agents_rl.rollouts.template import check_tool_template
    from hello_agents_rl.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(path, trust_remote_code)
    check_tool_template(tokenizer, path)  # before the model loads
    model = load_model(path, trust_remote_code)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer


def evaluate_config(model: Any, tokenizer: Any, rows: Any, cfg: Any) -> dict[str, Any]:
    tools = resolve_tools(cfg.tools)
    environment = resolve_environment(cfg.environment) if cfg.environment is not None else None
    return evaluate_with_tools(model, tokenizer, rows, tools, environment, cfg.max_new_tokens, cfg.max_tool_turns,
                               cfg.batch_size, cfg.enable_thinking)


def run(cfg: Any) -> dict[str, Any]:
    """`action: evaluate` with `tools`/`environment`: the metrics above; transcripts to details_path."""
    from hello_agents_rl import data as data_layer

    rows = data_layer.load(cfg)
    model, tokenizer = load_for_eval(cfg.model_path, cfg.trust_remote_code)
    result = evaluate_config(model, tokenizer, rows, cfg)
    details = result.pop("details")
    if cfg.details_path:
        write_details(cfg.details_path, details)
    if cfg.return_details:
        result["details"] = details
    return {"status": "completed", "model_path": cfg.model_path, "split": cfg.split, **result}


def write_details(path: str | Path, details: list[dict[str, Any]]) -> None:
    """One JSON object per question, transcript included (eval_details.jsonl)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(d, ensure_ascii=False, default=str) + "\n" for d in details), encoding="utf-8")


TOOL_COLUMNS = [("tool_call_rate", "Tool calls", "{:.1%}"), ("failed_call_rate", "Failed calls", "{:.1%}"),
                ("mean_calls", "Calls/question", "{:.2f}"), ("turns_exhausted_rate", "Out of turns", "{:.1%}")]


def compare(cfg: Any) -> dict[str, Any]:
    """`action: compare` with tools: one row per model, the tool columns beside accuracy."""
    from hello_agents_rl import data as data_layer

    rows = data_layer.load(cfg)
    from hello_agents_rl.rollouts.template import check_tool_template
    from hello_agents_rl.models import load_tokenizer

    for name, path in cfg.models.items():  # every template checked before the first (long) evaluation
        check_tool_template(load_tokenizer(path, cfg.trust_remote_code), path, key=f"models.{name}")
    table = []
    for name, path in cfg.models.items():
        model, tokenizer = load_for_eval(path, cfg.trust_remote_code)
        metrics = evaluate_config(model, tokenizer, rows, cfg)
        metrics.pop("details")
        metrics.pop("tool_stats")
        table.append({"model": name, "path": path, **metrics})
        del model
    markdown = comparison_markdown(table)
    if cfg.report_path:
        Path(cfg.report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.report_path).write_text(markdown, encoding="utf-8")
    print(markdown, flush=True)
    return {"status": "completed", "num_questions": len(rows), "table": table, "markdown": markdown}


def comparison_markdown(table: list[dict[str, Any]]) -> str:
    columns = [("accuracy", "Accuracy", "{:.1%}"), ("format_rate", "Format", "{:.1%}"), *TOOL_COLUMNS,
               ("mean_tokens", "Tokens", "{:.1f}"), ("seconds_per_question", "s/question", "{:.3f}")]
    lines = ["| Model | " + " | ".join(c[1] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in table:
        lines.append(f"| {row['model']} | " + " | ".join(fmt.format(row[key]) for key, _, fmt in columns) + " |")
    return "\n".join(lines) + "\n"
