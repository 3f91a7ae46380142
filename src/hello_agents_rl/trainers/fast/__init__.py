"""Faster GRPO on TRL's own loss: the same trainer, the slow parts done leaner, in plain Python over torch.

`FastGRPOTrainer` is TRL's GRPOTrainer (prompts, rewards, group advantages, reference and KL, the clipped loss,
logging) with four replacements, each exact or documented (docs/performance.md):

1. Rollouts: `sample()` (sampling/) instead of `model.generate`: a functional view of a Llama-family decoder,
   LoRA merged once per rollout, q/k/v and gate/up fused, each distinct prompt prefilled once for its group and
   its keys read once per decode step by the group's rows; transformers' temperature/top-k/top-p sampling.
2. Training forward (CPU, LoRA): `LoraTrainView` (lora_forward.py), each distinct prompt once per group, an LM
   head that keeps its probabilities (lm_head.py). Same values and gradients; LoRA dropout on prompt tokens is
   drawn once per group instead of once per row (the same in expectation).
3. Reference (dropout-free) log-probs: `score()` runs the functional decoder without gradients, adapter off.
4. LoRA dropout on CPU: `FastDropout` (dropout.py), the same Bernoulli mask from fewer random draws.

Where each part applies is decided in gate.py (and by the views, which raise `Unsupported` for layers they do not
reproduce); anything else runs TRL's own code, warned once and recorded with its reason in `trainer.fast_path`
(results.json). Big batches compute the loss in chunks of whole groups (chunked_loss.py). `HELLO_AGENTS_FAST=0`
turns all of it off, `$HELLO_AGENTS_FAST_OFF` any optimisation (switches.py).
"""

from typing import Any

__all__ = ["FastGRPOTrainer", "use_fast_dropout"]


def __getattr__(name: str) -> Any:
    """FastGRPOTrainer and use_fast_dropout on first use: importing a part of the fast path (its switches) does
    not import TRL."""
    if name == "FastGRPOTrainer":
        from hello_agents_rl.trainers.fast.trainer import FastGRPOTrainer

        return FastGRPOTrainer
    if name == "use_fast_dropout":
        from hello_agents_rl.trainers.fast.dropout import use_fast_dropout

        return use_fast_dropout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
