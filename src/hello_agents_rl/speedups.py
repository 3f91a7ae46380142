"""A leaf: the fast path's optimisations, one switch each, so a benchmark measures what each one buys.

`HELLO_AGENTS_FAST_OFF=packed_weights,inverse_cdf` turns those off (the rest stay on); `HELLO_AGENTS_FAST=0`
(trainers/fast/verified.py) turns the whole fast path off. Every entry has a semantics test
(tests/test_speedups.py) and a benchmark variant `ours-<name>` (benchmarks/real_model.py). Imports nothing of
the package.
"""

from __future__ import annotations

import functools
import os

OFF_SWITCH = "HELLO_AGENTS_FAST_OFF"

OPTIMISATIONS = {
    "packed_weights": "the sampler's fp32 matmuls on weights packed once per rollout for the CPU's GEMM (MKL's on "
                      "Intel, oneDNN's elsewhere: onednn_gemm): the same products up to float rounding, without "
                      "re-packing every weight on every call",
    "streamed_gemm": "on Intel CPUs with AVX-512, the sampler's products at a decode step's <= 64 rows on weights "
                     "packed into 16-column panels and streamed with a software prefetch (our kernel, "
                     "rollouts/sampling/kernels/) instead of MKL's packed GEMM, which reads and then computes; "
                     "the same products up to float rounding",
    "merge_and_pack": "with streamed_gemm, a rollout's copies of the weights (LoRA merged, q/k/v and gate/up "
                      "concatenated, packed into panels) built in one pass of our kernel instead of torch's five "
                      "passes over them; the same weights up to float rounding",
    "fused_decode_attention": "on CPUs with AVX-512, a decode step's grouped attention (shared_prompt_kv) as one "
                              "kernel (rollouts/sampling/kernels/) that reads each key and value once and stores the "
                              "step's own, instead of ~11 torch operations per layer; the same attention up to float "
                              "rounding",
    "fused_norm_and_rope": "on CPUs with AVX-512, the sampler's RMSNorm and RoPE as one kernel call each "
                           "(rollouts/sampling/kernels/) instead of several torch operations: the same values up "
                           "to float rounding",
    "fused_decode_layer": "on CPUs with AVX-512, at a decode step's rows each residual add with the norm after it "
                          "and SwiGLU's silu(gate) * up as one pass of our kernels (rollouts/sampling/kernels/) "
                          "each, instead of ~5 torch operations per layer; the same values up to float rounding",
    "native_decode_loop": "on CPUs with AVX-512, a decode step's loop over the layers in our C++ "
                          "(rollouts/sampling/kernels/) on the same kernels as the Python loop (streamed_gemm, "
                          "fused_decode_attention, fused_norm_and_rope, fused_decode_layer), instead of ~10 Python "
                          "calls per layer; the same values",
    "fused_draw": "on CPUs with AVX-512, with inverse_cdf and without top-k/top-p, a sampled token from the "
                  "logits in one pass of our kernel (rollouts/sampling/kernels/): the temperature, softmax and "
                  "inverse CDF of `draw` on the same uniforms, instead of ~8 torch passes over [rows, vocab]",
    "onednn_gemm": "on CPUs other than Intel's (where MKL does not run its AVX-512 code), frozen fp32 weights "
                   "packed once for oneDNN's kernel instead: the sampler's and the reference's products, and the "
                   "training forward's frozen base with its input gradient (the same products up to float "
                   "rounding); off, MKL as on Intel",
    "inverse_cdf": "a sampled token from one uniform draw per row against the float64 cumulative distribution, "
                   "instead of torch.multinomial's exponential draw for every vocabulary entry",
    "vocab_tile": "the training forward's fused LM head scores the vocabulary in tiles of 2,048 on CPU instead of "
                  "TRL's 32,768 (a tile that stays in cache; the same log-probs up to float rounding)",
    "malloc_reuse": "glibc keeps freed blocks up to 32 MiB for reuse instead of unmapping them (CPU): fewer page "
                    "faults and zero-filled pages for a step's activations",
    "malloc_no_mmap": "with malloc_reuse, glibc serves blocks above 32 MiB from its heap too (mmap off), so that "
                      "the training LM head's [tokens, vocab] buffers are reused instead of mapped and page-faulted "
                      "afresh on every call",
    "shared_prompt_kv": "the sampler's decode steps read each prompt's keys and values once for its group "
                        "(num_generations rows) instead of from a copy in every row: one matrix product of the "
                        "group's queries, the same attention up to float rounding",
    "integer_dropout_mask": "FastDropout's keep mask as 0/1 int16 instead of bool: x * mask (forward) and "
                            "grad * mask (backward) then run vectorised, where a bool operand is converted element "
                            "by element on CPU (about 10x slower at a LoRA branch's input); the same mask, the "
                            "same values",
    "lm_head_row_tiles": "the training LM head's softmax and entropy taken over tiles of 32 rows in cache, in "
                         "place on its logits, instead of whole-batch passes that each allocate (and page-fault) "
                         "a fresh [tokens, vocab] buffer; the same values up to float rounding",
    "functional_forward": "the LoRA training forward as one function of the policy's tensors (CPU, float32): "
                          "fused frozen q/k/v and gate/up products, each LoRA branch added by one addmm with its "
                          "scale folded in, and an LM head that keeps the probabilities for its backward",
}


def on(name: str) -> bool:
    """Whether optimisation `name` is switched on (all are, unless named in $HELLO_AGENTS_FAST_OFF)."""
    if name not in OPTIMISATIONS:
        raise KeyError(f"unknown optimisation {name!r}; known: {', '.join(OPTIMISATIONS)}")
    return name not in _switched_off(os.environ.get(OFF_SWITCH, ""))


@functools.cache
def _switched_off(value: str) -> frozenset[str]:
    """The names in one value of $HELLO_AGENTS_FAST_OFF, parsed once per value (the decode step asks per layer)."""
    off = frozenset(part.strip() for part in value.split(",") if part.strip())
    unknown = off - OPTIMISATIONS.keys()
    if unknown:
        raise ValueError(f"${OFF_SWITCH} names {', '.join(sorted(unknown))}; known: {', '.join(OPTIMISATIONS)}")
    return off
