"""TRL's GRPO loss variants and dynamic sampling: which settings go together.

What TRL 1.16 refuses, or accepts and then computes something no paper meant, is refused here before any model
loads, with the key and the fix. Companion keys (sapo's temperatures, vespo's gamma shape, clip_range_high where
nothing reads it) are refused when set for a loss that ignores them: a setting that silently does nothing is a
mistake the user would never see.
"""

from __future__ import annotations

from typing import Any, Literal

LossType = Literal["grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo"]

# Keys only one loss type reads (TRL's GRPOConfig fields of the same names).
COMPANIONS: dict[str, tuple[str, ...]] = {
    "sapo": ("sapo_temperature_pos", "sapo_temperature_neg"),
    "vespo": ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),
}
# Loss types whose per-token loss has no clip, so no clip_range_high (TRL reads epsilon_high only in the others).
UNCLIPPED = ("sapo", "vespo")
# cispo caps each importance-sampling weight at clip_range_high; TRL's default (= clip_range, 0.2) would cap every
# weight near 1 at 0.2. ScaleRL's value:
CISPO_CAP = 5.0


def _set(cfg: Any, given: set[str]) -> set[str]:
    """The keys given with a value other than their default (a whole config written back, e.g. results.json's,
    gives every key: only the ones it changed count as set)."""
    return {key for key in given if key in type(cfg).model_fields and getattr(cfg, key) != type(cfg).model_fields[key].default}


def loss_problem(cfg: Any, given: set[str]) -> str | None:
    """Why the loss keys of a train config do not go together (None: they do); `given` = the keys the user gave."""
    given = _set(cfg, given)
    loss, level = cfg.loss_type, cfg.importance_sampling_level
    if loss == "luspo" and level != "sequence":
        return ("`importance_sampling_level`: loss_type luspo is a sequence-level loss (LUSPO scales each "
                "completion's GSPO loss by its length; TRL requires sequence-level ratios for it). Fix: set "
                "importance_sampling_level: sequence")
    if loss == "vespo" and level != "token":
        return ("`importance_sampling_level`: loss_type vespo computes its own sequence-level weights from token "
                "ratios. Fix: leave importance_sampling_level at token")
    if loss == "cispo" and (cfg.clip_range_high is None or cfg.clip_range_high < 1):
        return (f"`clip_range_high`: loss_type cispo caps each importance weight at clip_range_high (got "
                f"{cfg.clip_range_high}; unset, TRL caps at clip_range {cfg.clip_range}, below the weights' 1). "
                f"Fix: set clip_range_high: {CISPO_CAP:g} (ScaleRL), or any value >= 1")
    if loss == "vespo" and cfg.use_vllm:
        return ("`loss_type`: vespo with use_vllm needs TRL's token-level vLLM importance sampling, which this tool "
                "does not set. Fix: use another loss_type, or use_vllm: false")
    for owner, keys in COMPANIONS.items():
        unused = [key for key in keys if key in given and loss != owner]
        if unused:
            return f"`{unused[0]}`: read only by loss_type {owner} (this run: {loss}). Fix: remove it, or set loss_type: {owner}"
    if "clip_range_high" in given and loss in UNCLIPPED:
        return f"`clip_range_high`: loss_type {loss} has no clip, so nothing reads it. Fix: remove it"
    targets = [cfg.lora_target_modules] if isinstance(cfg.lora_target_modules, str) else cfg.lora_target_modules
    if cfg.algorithm == "grpo" and cfg.use_lora and "lm_head" in targets:
        return ("`lora_target_modules`: GRPO computes log-probs from lm_head's weight directly, so an adapter there "
                "would never train (TRL refuses it). Fix: remove 'lm_head'")
    return dynamic_sampling_problem(cfg, given)


def dynamic_sampling_problem(cfg: Any, given: set[str]) -> str | None:
    mode = cfg.dynamic_sampling
    if "dynamic_sampling_rounds" in given and mode != "resample":
        return (f"`dynamic_sampling_rounds`: bounds resample's generation rounds (dynamic_sampling is {mode}). "
                "Fix: remove it, or set dynamic_sampling: resample")
    if mode == "off":
        return None
    if cfg.algorithm != "grpo":
        return f"`dynamic_sampling`: leaves out GRPO groups with equal rewards; an {cfg.algorithm} run has none. Fix: remove it"
    if cfg.use_vllm:
        return "`dynamic_sampling`: not verified with vLLM. Fix: dynamic_sampling: off, or use_vllm: false"
    return None
