"""What TRL, transformers and PEFT call our keys: the names a user coming from them types, and trl_args' targets.

One table: the did-you-mean for an unknown key reads it, tests/test_config.py checks that trl_args sets each of
these fields from its key, and docs/usage.md's mapping table lists each pair.
"""

from __future__ import annotations

THEIR_NAME_FOR = {  # our key -> the field it drives in trl.GRPOConfig / SFTConfig, or peft.LoraConfig
    "kl_coef": "beta",
    "clip_range": "epsilon",
    "clip_range_high": "epsilon_high",
    "max_new_tokens": "max_completion_length",
    "batch_size": "per_device_train_batch_size",
    "num_epochs": "num_train_epochs",
    "warmup_ratio": "warmup_steps",
    "lora_rank": "r",
    "lora_target_modules": "target_modules",
    "max_tool_turns": "max_tool_calling_iterations",
}
OUR_KEY_FOR = {theirs: ours for ours, theirs in THEIR_NAME_FOR.items()}
