"""A leaf: the fast path's on/off switch and its optimisations, one switch each, so a benchmark measures each one.

`HELLO_AGENTS_FAST=0` turns the whole fast path off (TRL's own code everywhere; the list below is then not read).
`HELLO_AGENTS_FAST_OFF=packed_weights,inverse_cdf` turns those optimisations off (the rest stay on; `all` turns
every one off). Every entry has a semantics test (tests/test_fast_switches.py) and a benchmark variant `ours-<name>`
(benchmarks/real_model.py). Imports nothing of the package.
"""

from __future__ import annotations

import functools
import os

ENV_SWITCH = "HELLO_AGENTS_FAST"  # 0/false/no/off: TRL's own code everywhere
OFF_SWITCH = "HELLO_AGENTS_FAST_OFF"

OPTIMISATIONS = {
    "packed_weights": "the sampler's fp32 matmuls on weights packed once per rollout for the CPU's GEMM (MKL's on "
                      "Intel, oneDNN's elsewhere: onednn_gemm): the same products up to float rounding, without "
                      "re-packing every weight on every call",
    "onednn_gemm": "on CPUs other than Intel's (where MKL does not run its AVX-512 code), frozen fp32 weights "
                   "packed once for oneDNN's kernel instead: the sampler's and the reference's products, and the "
                   "training forward's frozen base with its input gradient (the same products up to float "
                   "rounding); off, MKL as on Intel",
    "inverse_cdf": "a sampled token from one uniform draw per row against the float64 cumulative distribution, "
                   "instead of torch.multinomial's exponential draw for every vocabulary entry",
    "malloc_reuse": "glibc keeps freed blocks for reuse instead of unmapping them (CPU), those above its 32 MiB mmap "
                    "ceiling (the training LM head's [tokens, vocab] buffers) served from its heap too: fewer page "
                    "faults and zero-filled pages for a step's activations",
    "shared_prompt_kv": "the sampler's decode steps read each prompt's keys and values once for its group "
                        "(num_generations rows) instead of from a copy in every row: one matrix product of the "
                        "group's queries, the same attention up to float rounding",
    "integer_dropout_mask": "FastDropout's keep mask as 0/1 int16 instead of bool: x * mask (forward) and "
                            "grad * mask (backward) then run vectorised, where a bool operand is converted element "
                            "by element on CPU (about 10x slower at a LoRA branch's input); the same mask, the "
                            "same values",
    "functional_forward": "the LoRA training forward as one function of the policy's tensors (CPU, float32): "
                          "fused frozen q/k/v and gate/up products, each LoRA branch added by one addmm with its "
                          "scale folded in, and an LM head that keeps the probabilities for its backward, its softmax and entropy "
                          "taken over tiles of 32 rows in place on its logits (no fresh [tokens, vocab] buffer per "
                          "pass)",
}


def enabled() -> bool:
    """Whether the fast path may run at all ($HELLO_AGENTS_FAST)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def on(name: str) -> bool:
    """Whether optimisation `name` is switched on: the fast path enabled and `name` not in $HELLO_AGENTS_FAST_OFF."""
    if name not in OPTIMISATIONS:
        raise KeyError(f"unknown optimisation {name!r}; known: {', '.join(OPTIMISATIONS)}")
    return enabled() and name not in _switched_off(os.environ.get(OFF_SWITCH, ""))


def problem() -> str | None:
    """What is wrong with $HELLO_AGENTS_FAST_OFF (None: nothing, or the fast path is off and it is not read)."""
    if not enabled():
        return None
    try:
        _switched_off(os.environ.get(OFF_SWITCH, ""))
    except ValueError as error:
        return str(error)
    return None


@functools.cache
def _switched_off(value: str) -> frozenset[str]:
    """The names in one value of $HELLO_AGENTS_FAST_OFF, parsed once per value (the decode step asks per layer)."""
    off = frozenset(part.strip().lower() for part in value.split(",") if part.strip())
    if off == {"all"}:
        return frozenset(OPTIMISATIONS)
    unknown = off - OPTIMISATIONS.keys()
    if unknown:
        raise ValueError(f"${OFF_SWITCH} names {', '.join(sorted(unknown))}, which are not optimisations; name "
                         f"some of {', '.join(OPTIMISATIONS)} (comma-separated), or `all`, or unset it")
    return off
