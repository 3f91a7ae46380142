"""The tiny model: a ~1M-parameter random Qwen3 with its own small tokenizer, built offline in a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.models.loading import CHAT_TEMPLATE


def build_tiny_model(out_dir: str | Path, seed: int = 0, hidden_size: int = 128, num_layers: int = 4) -> Path:
    """A ~1M-parameter random Qwen3 with its own tokenizer (digits one token each) and chat template."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    tokenizer = _tiny_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def _tiny_tokenizer() -> Any:
    """Byte-level BPE trained on a few template sentences: small vocab, any text encodes, digits split."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    core.decoder = decoders.ByteLevel()
    corpus = [
        "user\nWhat is 48 + 24?", "assistant\n48 + 24 = 72. Final Answer: 72", "system\nSolve the math problem "
        "step by step. End with 'Final Answer: <number>'.", "The answer is #### \\boxed{} how many more total",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # its progress bars print blank lines to stdout, before the path a CLI prints
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
