"""Faster GRPO on TRL's own loss: the same trainer, the slow parts done leaner (docs/performance.md).

`FastGRPOTrainer` is TRL's GRPOTrainer -- prompts, rewards, group advantages, the reference model and
KL, the clipped importance-ratio loss, logging -- with four replacements, each exact or documented:

1. Rollouts: `sample()` (trainers/fast/sampling/) instead of `model.generate`. For small and mid-sized models
   generate is mostly per-token Python overhead (mask building, cache objects, logits processors, PEFT's LoRA
   wrappers). `FastDecoder` is a functional view of a Llama-family decoder: LoRA merged into the weights once
   per rollout, q/k/v and gate/up fused into one matmul each, q/k norm and RoPE applied to all heads at once,
   a preallocated (growing) KV cache, and each distinct prompt prefilled once for its whole group, whose rows
   then read its keys once per decode step (one product of all their queries); on CPU the
   fused copies are packed once for MKL's GEMM and tokens are drawn by a float64 inverse CDF.
   Sampling is transformers' temperature/top-k/top-p; rows stop at EOS, never past max_new_tokens. The
   rollout hands TRL no log-probs, as TRL's generate path does (its loss uses the training forward's).
   Rollouts run without dropout (TRL's generate runs in train mode, so LoRA dropout is live there).
2. Training forward: each distinct prompt computed once per batch (a GRPO batch holds it num_generations
   times), its KV cache kept in the autograd graph and indexed out to the completions. On CPU under LoRA,
   `LoraTrainView` (lora_forward.py) does it as one function of the policy's tensors, with an LM head that keeps
   its probabilities (lm_head.py); elsewhere `shared_prefix_logps()` (shared_prefix.py) does it through the
   modules and TRL's own fused LM head. Same values and gradients; LoRA dropout on prompt tokens is drawn once
   per group instead of once per row (the same in expectation).
3. Reference (and any dropout-free) log-probs: `score()` runs the functional decoder without gradients,
   with the adapter off exactly as TRL's `use_adapter` leaves it -- no dropout involved, so exact.
4. LoRA dropout on CPU: `FastDropout` (dropout.py), the same Bernoulli mask from a quarter of the random draws
   (p rounded to a multiple of 2^-15).

Anything outside that (vLLM, continuous batching, images, DeepSpeed/FSDP, a DDP-wrapped training
forward, gradient checkpointing, any generation_config field generate() would apply beyond temperature/top-k/
top-p (repetition penalty, min_p, no_repeat_ngram_size, bad words...), extra generation kwargs, non
Llama-family or sliding-window models, quantized or DoRA layers) falls back to TRL's own code, unchanged;
so does everything when the installed TRL/transformers/PEFT are not the versions this was verified against
(verified.py: VERIFIED_VERSIONS), on a device it was not verified on (VERIFIED_DEVICES: CPU today), or when a
TRL method we override or an attribute we read is gone (coupling.py). Each fallback is warned once and recorded
with its reason in `trainer.fast_path` (the run's results.json). `HELLO_AGENTS_FAST=0` turns all of it off.
Big batches compute the loss in chunks of whole groups (chunked_loss.py): the same loss and gradients.
Each optimisation has its own switch (switches.py, $HELLO_AGENTS_FAST_OFF). Where each part applies is decided
in gate.py; the trainer calls the engine through one door (engine.py: sample, score, TrainForward).
"""

from typing import Any

__all__ = ["FastGRPOTrainer", "use_fast_dropout"]


def __getattr__(name: str) -> Any:
    """FastGRPOTrainer and use_fast_dropout on first use: importing a part of the fast path (its switches, its
    kernels) does not import TRL."""
    if name == "FastGRPOTrainer":
        from hello_agents_rl.trainers.fast.trainer import FastGRPOTrainer

        return FastGRPOTrainer
    if name == "use_fast_dropout":
        from hello_agents_rl.trainers.fast.dropout import use_fast_dropout

        return use_fast_dropout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
