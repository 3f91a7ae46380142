"""Where a decode step's time goes: the fast path's sampler on SmolLM2-135M under LoRA, part by part.

    python benchmarks/decode_step_parts.py [--prompts 4] [--generations 4] [--new-tokens 128] [--threads 2]

One `sample()` of prompts x generations rows (each prompt repeated, as a GRPO batch; prompts of ~150-170 tokens,
128 new tokens without EOS so that every step has every row), timed once to warm up and then with each part's
calls wrapped in a wall-clock timer, part by part: the prompt pass, the decode steps (and inside them the
projections, the attention over the caches, the norms, the residual adds, SwiGLU's activation and RoPE), the LM
head and the draw. Run it alone on quiet cores. The timers add a few microseconds per call (about 0.1 s in a
128-token run).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_model_common import smollm2_gguf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    from peft import LoraConfig, get_peft_model

    from hello_agents_rl.models import load_model, resolve_model_source
    from hello_agents_rl.trainers.fast.allocator import keep_freed_memory
    from hello_agents_rl.trainers.fast.sampling import FastDecoder, sampler
    from hello_agents_rl.trainers.fast.sampling import decoder as decoder_module

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the trainer runs it
    model = load_model(resolve_model_source(smollm2_gguf()))
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")).eval()
    rows = args.prompts * args.generations
    prompts = [[1] + list(range(100, 250 + (row // args.generations) * 7)) for row in range(rows)]
    seconds: dict[str, float] = defaultdict(float)
    parts: list[str] = []  # the timed parts, in the order they are printed

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        parts.extend([name] if name not in parts else [])

        def run(*a: Any, **k: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds[name] += time.perf_counter() - started
        return run

    builds = []
    for _ in range(2):  # the first build page-faults its fresh copies; the second is what a later rollout pays
        started = time.perf_counter()
        decoder = FastDecoder(model, pack_rows=rows)
        builds.append(time.perf_counter() - started)

    def run() -> float:
        seconds.clear()
        started = time.perf_counter()
        sampler.sample(model, prompts, args.new_tokens, [-1], 2, decoder=decoder, with_logprobs=False,
                       generator=torch.Generator().manual_seed(0))
        return time.perf_counter() - started

    sampler.prefill_shared = timed("prompt pass", sampler.prefill_shared)
    decoder.decode = timed("decode steps", decoder.decode)
    decoder_module.LinearView.__call__ = timed("  projections (and the prompt pass's, the LM head's)",
                                               decoder_module.LinearView.__call__)
    decoder_module.grouped_attention = timed("  attention (the step's key and value stored)",
                                             decoder_module.grouped_attention)
    decoder_module.rms_norm = timed("  norms (and the prompt pass's)", decoder_module.rms_norm)
    decoder_module.residual_norm = timed("  residual adds and their norms (and the prompt pass's)",
                                         decoder_module.residual_norm)
    decoder_module.silu_mul = timed("  silu(gate) * up (and the prompt pass's)", decoder_module.silu_mul)
    decoder_module.apply_rope = timed("  RoPE (and the prompt pass's)", decoder_module.apply_rope)
    decoder.logits = timed("LM head", decoder.logits)
    sampler.draw = timed("draw", sampler.draw)
    print(f"{rows} rows ({args.prompts} prompts x {args.generations}), {args.new_tokens} new tokens, "
          f"{args.threads} threads: decoder built in {builds[0]:.2f} s, again in {builds[1]:.2f} s")
    steps = args.new_tokens - 1
    run()  # warm-up
    total = run()
    print(f"\nsample() {total:.2f} s")
    print(f"{'part':<60} {'s':>6} {'ms/step':>8}")
    for name in parts:
        if seconds[name] or name in ("decode steps", "LM head"):
            print(f"{name:<60} {seconds[name]:>6.2f} {1000 * seconds[name] / steps:>8.1f}")
    rest = total - sum(seconds[n] for n in ("prompt pass", "decode steps", "LM head", "draw"))
    print(f"{'the rest of the loop':<60} {rest:>6.2f} {1000 * rest / steps:>8.1f}")


if __name__ == "__main__":
    main()
