"""Checks that need the data, the tokenizer or the model, run before anything is written to output_dir.

Each turns what would be a trainer traceback (or a silently useless run) into a ConfigError with the fix.
"""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlparse

from hello_agents_rl.config import TrainConfig
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.tasks.formatting import render_prompt
from hello_agents_rl.trainers.fast import switches
from hello_agents_rl.trainers.tool_run import uses_tools
from hello_agents_rl.trajectory import called

WANDB_DEFAULT_URL = "https://api.wandb.ai"


def check_fast_switches() -> None:
    """A misspelt $HELLO_AGENTS_FAST_OFF is refused now, not deep in trainer building after the model has loaded."""
    if problem := switches.problem():
        raise ConfigError(f"`{switches.OFF_SWITCH}` (environment): {problem}")


def check_vllm_device(cfg: TrainConfig) -> None:
    """vLLM generates on a CUDA GPU. Validation checked that vLLM is installed; whether a GPU is visible needs
    torch, which the config layer does not import, so it is asked here, at the start of the run."""
    if not cfg.use_vllm:
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("`use_vllm`: vLLM needs a CUDA GPU and none is visible; set use_vllm: false to generate with transformers")


def check_schedule(cfg: TrainConfig, num_rows: int, world_size: int = 1) -> None:
    """GRPO drops incomplete generation rounds (TRL's RepeatSampler): a round larger than the data means 0 steps."""
    if cfg.algorithm != "grpo":
        return  # SFT trains on a last partial batch: any data size gives at least one step
    per_round = cfg.batch_size * world_size * cfg.effective_steps_per_generation
    if num_rows < per_round:
        raise ConfigError(
            f"`batch_size`: one generation round takes batch_size {cfg.batch_size} x {world_size} process(es) x "
            f"steps_per_generation {cfg.effective_steps_per_generation} = {per_round} prompts, but the training data "
            f"has {num_rows}: the run would do 0 steps. Lower batch_size (or gradient_accumulation_steps / "
            "steps_per_generation), or give more data"
        )
    if cfg.step_credit and world_size > 1:
        raise ConfigError(
            f"`step_credit`: runs in one process (it matches the rewards TRL gathers from all {world_size} with the "
            "rollouts this one sampled). Fix: step_credit: 0, or one process"
        )
    if cfg.dynamic_sampling != "off" and world_size > 1:
        raise ConfigError(
            f"`dynamic_sampling`: runs in one process (a group's completions may sit on several of the "
            f"{world_size}, and each would leave out different rows). Fix: dynamic_sampling: off, or one process"
        )
    batches = (num_rows // per_round) * cfg.effective_steps_per_generation
    if batches < cfg.gradient_accumulation_steps:
        raise ConfigError(
            f"`gradient_accumulation_steps`: {cfg.gradient_accumulation_steps} micro-batches per step, but an epoch "
            f"of {num_rows} prompts has only {batches}: the run would do 0 steps. Lower it, or give more data"
        )


def check_sft_targets(cfg: TrainConfig, rows: Any) -> None:
    """SFT imitates each row's reference answer: a task whose checker verifies any valid solution has none."""
    if cfg.algorithm != "sft" or "completion" not in rows.column_names:
        return
    missing = sum(not completion for completion in rows["completion"])
    if missing:
        raise ConfigError(f"`algorithm`: {missing} of {len(rows)} rows of {cfg.dataset} have no reference answer "
                          "(the task's checker verifies any valid solution), so SFT has nothing to imitate; train "
                          "it with algorithm: grpo")


def check_sft_lengths(cfg: TrainConfig, tokenizer: Any, rows: Any) -> None:
    """TRL drops examples whose answer is cut off entirely by max_length; all of them dropped is no training."""
    if cfg.algorithm != "sft":
        return
    lengths = [len(tokenizer(render_prompt(tokenizer, r["prompt"], cfg.enable_thinking), add_special_tokens=False)
                   ["input_ids"]) for r in rows.select(range(min(len(rows), 256)))]
    if lengths and min(lengths) >= cfg.max_length:
        raise ConfigError(
            f"`max_length`: {cfg.max_length} tokens leave no answer token in any example (prompts are "
            f"{min(lengths)}-{max(lengths)} tokens, so every example would be dropped); raise max_length above "
            f"{max(lengths)} plus the answer's length"
        )


def check_chain_budget(cfg: TrainConfig, tokenizer: Any, rows: Any) -> str | None:
    """GRPO with tools on rows that carry a transcript (`completion`): max_new_tokens is the whole chain's budget
    (every call, every tool result and the answer). A warning, before the model loads, when transcripts are longer
    than it (a model may answer in fewer tokens than its demonstrator, so it is not refused)."""
    if cfg.algorithm != "grpo" or not uses_tools(cfg) or "completion" not in rows.column_names:
        return None
    sample = rows.select(range(min(len(rows), 64)))
    lengths = []
    for row in sample:
        completion = row["completion"]
        if not isinstance(completion, list) or not all(isinstance(m, dict) for m in completion):
            continue
        if not any(m.get("tool_calls") for m in completion):
            continue  # a bare answer: no chain to measure
        try:
            head = render_prompt(tokenizer, row["prompt"], cfg.enable_thinking)
            whole = tokenizer.apply_chat_template(row["prompt"] + [_as_sent(m) for m in completion], tokenize=False,
                                                  enable_thinking=cfg.enable_thinking)
        except Exception:  # noqa: BLE001 - a template that cannot render a transcript: no estimate
            return None
        count = len(tokenizer(whole, add_special_tokens=False)["input_ids"])
        lengths.append(count - len(tokenizer(head, add_special_tokens=False)["input_ids"]))
    longer = [n for n in lengths if n > cfg.max_new_tokens]
    if not longer:
        return None
    which = "every one" if len(longer) == len(lengths) else f"{len(longer)} of {len(lengths)}"
    return (f"max_new_tokens ({cfg.max_new_tokens}) is the budget of a whole chain (every call, every tool result and "
            f"the answer), and {which} of the dataset's transcripts (the first {len(sample)} rows) take more "
            f"({min(lengths)}-{max(lengths)} tokens with this model's chat template): rollouts like them stop on a "
            f"call, unanswered, and earn no reward; raise max_new_tokens to {max(lengths)}")


def _as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """A transcript message as TRL's rollouts carry it: tool-call arguments as an object, not a JSON string (a
    template's `tojson` would escape the string, and count more tokens than the model writes)."""
    if not message.get("tool_calls"):
        return message
    sent = []
    for call in message["tool_calls"]:
        function = call.get("function", call)
        _, arguments = called(call)  # None where they are no JSON object: rendered as written
        sent.append({"type": "function", "function": {**function, **({} if arguments is None else
                                                                      {"arguments": arguments})}})
    return {**message, "tool_calls": sent}


def check_lora_targets(cfg: TrainConfig, model: Any) -> None:
    """PEFT's "target modules not found" names no alternative: list the model's linear layers instead."""
    import torch

    targets = cfg.lora_target_modules
    if not cfg.use_lora or targets == "all-linear":
        return
    wanted = [targets] if isinstance(targets, str) else list(targets)
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    names = [name for name, _ in model.named_modules()]
    missing = [t for t in wanted if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        raise ConfigError(
            f"`lora_target_modules`: {missing[0]!r} matches no module of this model; its linear layers are "
            f"{', '.join(linear)} (or use 'all-linear')"
        )


def check_wandb_reachable(targets: list[str], timeout: float = 3.0) -> None:
    """wandb online with no network retries for minutes, then fails: one quick connection decides it now."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if "wandb" not in targets or mode in ("offline", "disabled", "dryrun"):
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL", WANDB_DEFAULT_URL))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        raise ConfigError(
            f"`report_to`: wandb cannot reach {url.geturl()}; set WANDB_MODE=offline (sync later with `wandb sync`) "
            "or report_to: tensorboard"
        ) from None
