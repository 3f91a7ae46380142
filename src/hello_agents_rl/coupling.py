"""A leaf: every private TRL/transformers name the package uses, in one place, checked before it is relied on.

Private names change without a deprecation: an override TRL no longer calls would silently never run, an attribute
read through a default would silently stop meaning what TRL means. So the fast trainer checks these before its
first step (versions and methods before TRL's `__init__`, attributes right after it) and, on any miss, runs TRL's
own code for the whole run with the missing name in `fast_path`'s fallbacks and a warning; the evaluation rollout
loop checks the method it borrows before calling it; dynamic sampling refuses to start without what it hooks; the
agent trainer and the server check what they replace. tests/test_fast_coupling.py checks that no other private
name of TRL or transformers is used anywhere in the package, and a run whose first log lacks a metric it reads
says which.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

# TRL GRPOTrainer methods FastGRPOTrainer overrides, with the leading parameters its overrides pass on to them
# (compute_loss is public, but the chunked loss calls it per chunk with these parameters).
OVERRIDDEN_METHODS = {
    "_generate_single_turn": (
        "self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images",
    ),
    "_get_per_token_logps_and_entropies": (
        "self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
        "compute_aux_loss",
    ),
    "compute_loss": ("self", "model", "inputs", "return_outputs", "num_items_in_batch"),
}
# A TRL method the evaluation rollout loop (rollouts/loop.py) calls on a stand-in for the trainer, to tokenize tool
# results exactly as training does, with its leading parameters; the stand-in's attributes are BORROWED_READS.
BORROWED_METHOD = ("trl", "GRPOTrainer", "_get_tool_suffix_ids", ("self", "tool_messages"))
BORROWED_READS = ("processing_class", "_tokenizer", "chat_template", "chat_template_kwargs", "_is_vlm")
# hello-agents 1.0.x agents' private names that training reads (rollouts/agent_spec.py), to send what the agent
# itself sends; agent_spec.AGENT_NEEDS says which an agent must have, checked for each agent before anything loads.
HELLO_AGENTS_READS = {
    "_build_messages": "the messages it sends (system prompt, then the question)",
    "_build_tool_schemas": "the tool schemas it sends",
    "_execute_tool_call": "1.0.0: a tool call's tool message",
    "_aexecute_tool_call": "1.0.1: a tool call's tool message (awaited by its runtime)",
    "_handle_builtin_tool": "ReActAgent's Thought and Finish",
    "_builtin_tools": "which of its tools are built in (where present)",
    "_history": "an agent that already ran (where present): training renders fresh runs",
}
# Private transformers methods the fast path's sampler calls to merge generation configs as generate() does
# (trainers/fast/sampling/settings.py): (module, class, method).
CALLED_METHODS = (
    ("transformers", "GenerationMixin", "_prepare_generation_config"),
    ("transformers", "GenerationConfig", "_get_default_generation_params"),
)
# Attributes TRL's (and transformers') Trainer __init__ sets that the fast trainer reads, and what reads them.
ATTRIBUTES_READ = {
    "use_vllm": "sampler: vLLM generates instead",
    "use_transformers_continuous_batching": "sampler: continuous batching generates instead",
    "_is_vlm": "sampler: vision-language models keep generate",
    "generation_config": "sampler: what generate() would sample with (set unless use_vllm)",
    "max_completion_length": "sampler: max_new_tokens",
    "eos_token_ids": "sampler: where completions end",
    "_tokenizer": "sampler: the pad token",
    "temperature": "scorer: log-probs of the temperature-scaled policy",
    "loss_type": "loss chunks: how the loss splits over chunks",
    "importance_sampling_level": "loss chunks: sequence-level metrics keep the whole batch",
    "aux_loss_enabled": "loss chunks: an MoE aux loss keeps the whole batch",
    "top_entropy_quantile": "loss chunks: entropy masking keeps the whole batch",
    "_entropy_bonus_enabled": "loss chunks: an entropy bonus keeps the whole batch",
    "_metrics": "loss chunks: one logged value per batch, not per chunk",
    "accelerator": "every part: unwrap, autocast, backward",
    "is_deepspeed_enabled": "every part: DeepSpeed keeps TRL's code",
    "is_fsdp_enabled": "every part: FSDP keeps TRL's code",
}
# Attributes only set in some configurations: name -> the attribute that says it is not needed.
NOT_NEEDED_WHEN = {"generation_config": "use_vllm"}
# The chunked loss backpropagates each chunk itself and hands the Trainer a detached total: that is TRL's
# gradient only if the loss TRL returns is already divided by the gradient accumulation steps, which
# transformers' Trainer.training_step takes from this class attribute (True: used as is).
GA_SCALING_FLAG = "loss_is_scaled_for_ga"


def class_blocker(trl_trainer_class: type) -> str | None:
    """Why the fast trainer must not override TRL's methods here (None: each is there, with its parameters)."""
    problem = methods_blocker(trl_trainer_class, OVERRIDDEN_METHODS)
    if problem:
        return problem
    for module, owner, name in CALLED_METHODS:
        if not callable(getattr(getattr(importlib.import_module(module), owner, None), name, None)):
            return f"{module} has no {owner}.{name} any more (the sampler merges generation configs with it)"
    return None


def signature_problem(module: str, owner: str, name: str, expected: tuple[str, ...]) -> str | None:
    """Why module.owner.name is not there with these leading parameters (None: it is)."""
    found = importlib.import_module(module)
    method = getattr(getattr(found, owner, None) if owner else found, name, None)  # owner "": a module's function
    where = f"{owner}.{name}" if owner else name
    if method is None:
        return f"{module} has no {where} any more"
    if tuple(inspect.signature(method).parameters)[: len(expected)] != expected:
        return f"{module} changed the signature of {where}"
    return None


def borrowed_blocker() -> str | None:
    """Why the rollout loop cannot borrow TRL's tool-suffix tokenizer (None: it is there, with its parameters)."""
    return signature_problem(*BORROWED_METHOD)


def instance_blocker(trainer: Any, trl_trainer_class: type) -> str | None:
    """Why, after TRL's __init__, the fast trainer must leave this trainer to TRL (None: all it reads is there)."""
    cls = trl_trainer_class.__name__
    for name, reader in ATTRIBUTES_READ.items():
        skip_if = NOT_NEEDED_WHEN.get(name)
        if skip_if and getattr(trainer, skip_if, False):
            continue
        if not hasattr(trainer, name):
            return f"{cls} has no attribute {name} after __init__ (read by the {reader.split(':')[0]}; renamed?)"
    scaled = getattr(trainer, GA_SCALING_FLAG, None)
    if scaled is not True:
        return (f"{cls}.{GA_SCALING_FLAG} is {scaled!r}, not True: the chunked loss relies on TRL's loss being "
                "scaled for gradient accumulation already")
    return None


# What dynamic sampling (trainers/dynamic_sampling.py) relies on in TRL's GRPOTrainer: the methods it overrides or
# calls, with their leading parameters, and that `_generate_and_score_completions` calls `_generate(prompts)` once
# (returning completion ids at [1] and completions at [3]), then the no-grad forwards, then `_calculate_rewards`
# with the same `prompts` and `completions` objects. A run checks that each round went so (dynamic_sampling.py).
DYNAMIC_SAMPLING_METHODS = {
    "_prepare_inputs": ("self", "generation_batch"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_generate": ("self", "prompts"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    **{name: OVERRIDDEN_METHODS[name] for name in ("_get_per_token_logps_and_entropies", "compute_loss")},
}
# Attributes it reads after TRL's __init__: reward weights and group size (which groups vary), the metrics it
# logs to, the pad token (joining refill rounds), the data and step (drawing refill prompts), and the micro-step
# counter and buffer of _prepare_inputs (splitting a round's batch into whole groups).
DYNAMIC_SAMPLING_ATTRIBUTES = ("reward_weights", "num_generations", "_metrics", "_tokenizer", "train_dataset", "state",
                               "num_iterations", "_step", "_buffered_inputs")


# Private methods other parts of the package override or replace, with the leading parameters they are called with
# and what relies on them: (module, class, method) -> (parameters, what). Each part checks its entry before use.
REPLACED_METHODS = {
    ("trl", "GRPOTrainer", "_get_tool_suffix_ids"): (
        ("self", "tool_messages"), "trainers/agent_run.py: a ReActAgent's Finish ends its rollout, through TRL "
        "rolling back a round whose tool messages are longer than the completion budget"),
    ("transformers.cli.serving.chat_completion", "ChatCompletionHandler", "_validate_request"): (
        ("self", "body"), "workflows/transformers_serve.py: tool_choice refused"),
    ("transformers.cli.serving.utils", "BaseHandler", "_resolve_model"): (
        ("self", "body"), "workflows/transformers_serve.py: any model name served, on every endpoint"),
    ("transformers.cli.serving.chat_completion", "", "parse_assistant_message"): (
        ("processor", "model", "generated_ids", "input_ids", "cleaned_content"),
        "workflows/transformers_serve.py: a reply whose tool call max_tokens cut short is returned as its text"),
}
# TRL's logged metrics that the console line, the training doctor and dynamic sampling read (TRL renames them at
# times): name -> what reads it, and whether a run logs it always (False: only in some configurations).
METRICS_READ = {
    "loss": ("the console line, the doctor", True),
    "reward": ("the console line, the doctor", True),
    "kl": ("the console line, the doctor (TRL logs it when kl_coef > 0)", False),
    "frac_reward_zero_std": ("the doctor's zero-variance finding", True),
    "completions/clipped_ratio": ("the doctor's truncation finding", True),
}


def replaced_blocker(module: str, owner: str, name: str) -> str | None:
    """Why the package's override or replacement of module.owner.name would not be called as written (None: it
    would)."""
    return signature_problem(module, owner, name, REPLACED_METHODS[(module, owner, name)][0])


def missing_metrics(logs: dict[str, Any], kl_logged: bool) -> list[str]:
    """The metrics of METRICS_READ a training log lacks (kl only where kl_coef > 0)."""
    return [name for name, (_, always) in METRICS_READ.items() if name not in logs and (always or kl_logged)]


def methods_blocker(trl_trainer_class: type, methods: dict[str, tuple[str, ...]]) -> str | None:
    """Which of `methods` (name -> leading parameters) this TRL class lacks or changed (None: all as expected)."""
    for name, expected in methods.items():
        method = getattr(trl_trainer_class, name, None)
        if method is None:
            return f"TRL has no {trl_trainer_class.__name__}.{name} any more (our override would never run)"
        if tuple(inspect.signature(method).parameters)[: len(expected)] != expected:
            return f"TRL changed the signature of {trl_trainer_class.__name__}.{name}"
    return None


def dynamic_sampling_blocker(trl_trainer_class: type) -> str | None:
    """Why dynamic sampling cannot hook this TRL (None: every method is there, with its parameters)."""
    return methods_blocker(trl_trainer_class, DYNAMIC_SAMPLING_METHODS)
