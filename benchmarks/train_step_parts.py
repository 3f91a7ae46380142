"""Where one prompt group's training forward+backward goes on SmolLM2-135M (the functional LoRA forward).

    python benchmarks/train_step_parts.py [--threads 2] [--prompt 84] [--completion 126] [--group 4]

One group (a prompt and `--group` completions, the chunk the loss runs on) through trainers/fast/lora_forward.py,
forward and backward, best of 3 after a warm-up, in four configurations, each removing one more part:
LoRA dropout 0.05 (the tool's default), dropout 0, no LoRA branches (the base with input gradients only), and no
attention. The differences are what dropout, the LoRA branches and attention cost; the rest is the frozen base's
matrix products, the LM head and the elementwise work between them.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=84)
    parser.add_argument("--completion", type=int, default=126)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from hello_agents_rl.trainers.fast.allocator import keep_freed_memory

    keep_freed_memory()  # as the trainer runs it
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from hello_agents_rl.models import packaged, resolve_model_source
    from hello_agents_rl.trainers.fast.dropout import use_fast_dropout
    from hello_agents_rl.trainers.fast.lora_forward import LoraTrainView

    source = resolve_model_source(str(packaged.smollm2_gguf()))
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (1, args.prompt), generator=g).repeat(args.group, 1)
    ids = torch.cat([prompt, torch.randint(100, 40000, (args.group, args.completion), generator=g)], 1)
    mask = torch.ones_like(ids)

    def view_with(dropout: float) -> LoraTrainView:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
        use_fast_dropout(model)
        return LoraTrainView(model.train())

    def seconds(view: LoraTrainView) -> float:
        best = float("inf")
        for _ in range(4):
            started = time.perf_counter()
            logps, _ = view.logps(ids, mask, args.completion, 1.0, True)
            logps.sum().backward()
            best = min(best, time.perf_counter() - started)
        return best

    rows = [("LoRA, dropout 0.05", seconds(view_with(0.05)))]
    view = view_with(0.0)
    rows.append(("LoRA, dropout 0", seconds(view)))
    for layer in view.layers:
        for projection in (layer.qkv, layer.o, layer.gate_up, layer.down):
            projection.branches = []
    layers = view._layers
    view._layers = lambda h, *a, **k: layers(h.requires_grad_(), *a, **k)  # the backward still runs through it
    rows.append(("no LoRA branches (input gradients only)", seconds(view)))
    attention = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = lambda q, k, v, **kw: q * 1.0
    try:
        rows.append(("no LoRA branches, no attention", seconds(view)))
    finally:
        F.scaled_dot_product_attention = attention
    tokens = args.prompt + args.group * args.completion
    print(f"one group: {args.group} completions of {args.completion} tokens after a {args.prompt}-token prompt "
          f"({tokens} tokens), {args.threads} threads; seconds, forward+backward")
    parts = ["LoRA dropout", "LoRA branches", "attention", "the rest: base products, LM head, elementwise"]
    for (name, s), (_, after), part in zip(rows, rows[1:] + [(None, 0.0)], parts):
        print(f"  {name:<42} {s:6.2f}   {part}: {s - after:.2f}")


if __name__ == "__main__":
    main()
