"""Can the tiny tool model learn to copy before SFT? Train it on random ids and numbers repeated after a colon,
then ask it to copy 100 new strings, greedy.

    python benchmarks/copy_pretraining.py SEED STEPS [--no-qk-norm] [--output-dir DIR]

The lookups demos' SFT spends a seed-dependent number of steps on a loss plateau before the model copies ids from
tool results (docs/agentic.md); a model that copies before SFT would take that out of the seeds' hands. Prints the
loss every 50 steps and how many of the 100 strings were copied exactly. `--no-qk-norm`: the same sizes as a Llama,
which has no query-key norm (a norm that caps how sharply an untrained head can attend).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path


def copy_word(rng: random.Random) -> str:
    """An id as the lookups task writes them (P4821, C017) or a number of 1 to 6 digits."""
    if rng.random() < 0.5:
        return rng.choice("PCKXQ") + "".join(rng.choice("0123456789") for _ in range(rng.choice((3, 4))))
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6)))


def copy_words(rng: random.Random) -> str:
    return " ".join(copy_word(rng) for _ in range(rng.randint(3, 8)))


def without_qk_norm(model: object, seed: int) -> object:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    c = model.config  # type: ignore[attr-defined]
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, max_position_embeddings=1024,
        tie_word_embeddings=True, bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seed", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--no-qk-norm", action="store_true")
    parser.add_argument("--output-dir", default="outputs/copy_pretraining")
    args = parser.parse_args()
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
    from hello_agents_rl.tasks import lookups

    out = Path(args.output_dir) / f"seed{args.seed}"
    base = build_tiny_tool_model(out / "tiny", seed=args.seed, corpus=lookups.tokenizer_corpus(), vocab_size=800)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    if args.no_qk_norm:
        model = without_qk_norm(model, args.seed)
    rng = random.Random(args.seed)
    texts = Dataset.from_dict({"text": [f"{words} : {words}" for words in (copy_words(rng) for _ in range(args.steps * 32))]})
    data = texts.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
    training = TrainingArguments(output_dir=str(out / "copy"), max_steps=args.steps, per_device_train_batch_size=32,
                                 learning_rate=2e-3, warmup_steps=0.05, lr_scheduler_type="constant_with_warmup",
                                 logging_steps=50, save_strategy="no", report_to=[], seed=args.seed, use_cpu=True)
    trainer = Trainer(model=model, args=training, train_dataset=data,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    started = time.time()
    trainer.train()
    model.eval()
    held_out, copied = random.Random(999), 0  # the same 100 strings for every seed
    for _ in range(100):
        target = copy_words(held_out)
        ids = tokenizer(target + " :", return_tensors="pt").input_ids
        with torch.no_grad():
            new = model.generate(ids, max_new_tokens=len(tokenizer(" " + target).input_ids), do_sample=False)
        copied += tokenizer.decode(new[0, ids.shape[1]:]).strip() == target
    losses = [(row["step"], round(row["loss"], 3)) for row in trainer.state.log_history if "loss" in row]
    print(json.dumps({"seed": args.seed, "steps": args.steps, "qk_norm": not args.no_qk_norm, "loss": losses,
                      "copied_of_100": copied, "seconds": round(time.time() - started)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
