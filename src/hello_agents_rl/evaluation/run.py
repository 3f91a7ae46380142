"""Batched evaluation: greedy accuracy, pass@k, format, length, numeric error, truncation, speed."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl import data as data_layer
from hello_agents_rl.config import EvaluateConfig
from hello_agents_rl.data import render_prompt
from hello_agents_rl.models import load_model, load_tokenizer, system_prompt_of, with_recorded_prompt
from hello_agents_rl.evaluation.analysis import analyse, error_fields, error_summary
from hello_agents_rl.rewards import extract_answer, follows_format, is_correct, parse_ground_truth


@dataclass
class Sample:
    text: str
    num_tokens: int
    truncated: bool


@torch.no_grad()
def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    max_new_tokens: int,
    batch_size: int = 32,
    temperature: float = 0.0,
    num_samples: int = 1,
    seed: int = 0,
) -> list[list[Sample]]:
    """num_samples completions per prompt, generated batch_size prompts at a time (left padding)."""
    model.eval()
    tokenizer.padding_side = "left"
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0} if temperature > 0 else {"do_sample": False}
    torch.manual_seed(seed)
    results: list[list[Sample]] = []
    device = next(model.parameters()).device
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
        batch = {k: v.to(device) for k, v in batch.items()}
        output = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            num_return_sequences=num_samples,
            pad_token_id=tokenizer.pad_token_id,
            top_k=None,
            **sampling,
        )
        for row in output[:, batch["input_ids"].shape[1] :].tolist():
            ended = next((i for i, token in enumerate(row) if token in eos_ids), None)
            tokens = row if ended is None else row[:ended]
            text = tokenizer.decode(tokens, skip_special_tokens=True)
            sample = Sample(text, len(tokens), ended is None and len(row) >= max_new_tokens)
            if len(results) == 0 or len(results[-1]) == num_samples:
                results.append([])
            results[-1].append(sample)
    return results


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
) -> dict[str, Any]:
    """Metrics over rows with `prompt` (chat messages) and `ground_truth`; details per question.

    `accuracy` is always greedy. pass@1..k come from one set of k samples per question at `temperature`
    (1.0 when it is 0 and k > 1), by the unbiased estimator; without sampling, pass@1 is the greedy accuracy.
    """
    prompts = [render_prompt(tokenizer, row["prompt"], enable_thinking) for row in rows]
    started = time.perf_counter()
    greedy = generate(model, tokenizer, prompts, max_new_tokens, batch_size, 0.0, 1, seed)
    sampling = k > 1 or temperature > 0
    sampled = generate(model, tokenizer, prompts, max_new_tokens, batch_size, temperature or 1.0, k, seed + 1) if sampling else greedy
    elapsed = time.perf_counter() - started
    details = []
    for row, (answer,), samples in zip(rows, greedy, sampled):
        predicted, truth = extract_answer(answer.text), parse_ground_truth(row["ground_truth"])
        details.append(
            {
                "question": row.get("question", ""),
                "ground_truth": row["ground_truth"],
                "completion": answer.text,
                "predicted": None if predicted is None else str(predicted),
                "correct": is_correct(answer.text, row["ground_truth"]),  # an unreadable answer or truth never passes
                "samples_correct": sum(is_correct(s.text, row["ground_truth"]) for s in samples),
                "pass_at_k": any(is_correct(s.text, row["ground_truth"]) for s in samples),
                "follows_format": follows_format(answer.text),
                "num_tokens": answer.num_tokens,
                "truncated": answer.truncated,
                **error_fields(predicted, truth),
                **analyse(row, answer.text, predicted, truth),
                **({"carry": row["carry"]} if "carry" in row else {}),
            }
        )
    result = summarise(details, k if sampling else 1, elapsed)
    if sampling:
        result["sampling_temperature"] = temperature or 1.0
    return result


def pass_at(n: int, correct: int, k: int) -> float:
    """The unbiased pass@k from n samples of which `correct` passed (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    return 1.0 if n - correct < k else 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def summarise(details: list[dict[str, Any]], k: int, elapsed: float) -> dict[str, Any]:
    n = max(len(details), 1)
    return {
        "num_questions": len(details),
        "accuracy": sum(d["correct"] for d in details) / n,
        **{f"pass_at_{j}": sum(pass_at(k, d["samples_correct"], j) for d in details) / n for j in range(1, k + 1)},
        "format_rate": sum(d["follows_format"] for d in details) / n,
        "mean_tokens": sum(d["num_tokens"] for d in details) / n,
        **error_summary(details),
        "truncation_rate": sum(d["truncated"] for d in details) / n,
        "seconds_per_question": elapsed / n,
        "details": details,
    }


def run(cfg: EvaluateConfig) -> dict[str, Any]:
    if cfg.tools or cfg.environment is not None:  # multi-turn rollouts with tools: hello_agents_rl.agentic
        from hello_agents_rl.evaluation.tools import run as run_with_tools

        return run_with_tools(cfg)
    cfg, prompt_source = with_recorded_prompt(cfg, cfg.model_path)  # the prompt the model was trained with
    rows = data_layer.load(cfg)
    tokenizer = load_tokenizer(cfg.model_path, cfg.trust_remote_code, key="model_path")
    model = load_model(cfg.model_path, cfg.trust_remote_code, key="model_path")
    if torch.cuda.is_available():
        model = model.to("cuda")
    result = evaluate_model(
        model, tokenizer, rows, cfg.max_new_tokens, cfg.batch_size, cfg.k, cfg.temperature, cfg.seed, cfg.enable_thinking
    )
    details = result.pop("details")
    if cfg.details_path:
        path = Path(cfg.details_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in details), encoding="utf-8")
    if cfg.return_details:
        result["details"] = details
    prompt = {"system_prompt": system_prompt_of(rows), "enable_thinking": cfg.enable_thinking, "source": prompt_source}
    return {"status": "completed", "model_path": cfg.model_path, "split": cfg.split, "prompt": prompt, **result}


def compare(cfg: Any) -> dict[str, Any]:
    """Every model on the same questions: one row each, and where they disagree."""
    if cfg.tools or cfg.environment is not None:  # with tools: the same table plus the tool columns
        from hello_agents_rl.evaluation.tools import compare as compare_with_tools

        return compare_with_tools(cfg)
    table, correct = [], {}
    # every model's path and tokenizer are checked before the first (long) evaluation starts
    tokenizers = {name: load_tokenizer(path, cfg.trust_remote_code, key=f"models.{name}") for name, path in cfg.models.items()}
    for name, path in cfg.models.items():
        model_cfg, prompt_source = with_recorded_prompt(cfg, path)  # the same questions, each in its model's prompt
        rows = data_layer.load(model_cfg)
        model = load_model(path, cfg.trust_remote_code, key=f"models.{name}")
        if torch.cuda.is_available():
            model = model.to("cuda")
        metrics = evaluate_model(model, tokenizers[name], rows, cfg.max_new_tokens, cfg.batch_size, cfg.k,
                                 cfg.temperature, cfg.seed, model_cfg.enable_thinking)
        correct[name] = [d["correct"] for d in metrics.pop("details")]
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


def comparison_markdown(table: list[dict[str, Any]], k: int = 1) -> str:
    columns = [("accuracy", "Accuracy (greedy)", "{:.1%}"), (f"pass_at_{k}", f"Pass@{k}", "{:.1%}"), ("format_rate", "Format", "{:.1%}"),
               ("mean_tokens", "Tokens", "{:.1f}"), ("truncation_rate", "Truncated", "{:.1%}"),
               ("mean_abs_error_wrong", "Abs. error (wrong)", "{:.2f}"), ("seconds_per_question", "s/question", "{:.3f}")]
    lines = ["| Model | " + " | ".join(c[1] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in table:
        lines.append(f"| {row['model']} | " + " | ".join(fmt.format(row[key]) for key, _, fmt in columns) + " |")
    return "\n".join(lines) + "\n"
