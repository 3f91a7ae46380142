"""The tiny model, able to call tools: the project's tiny Qwen3 with a tokenizer that knows tool calls.

Same architecture and size as `hello_agents_rl.models.build_tiny_model`; the tokenizer is trained on a
corpus that includes tool-call text (so a call is ~20 tokens, not ~60 bytes), has `<tool_call>` and
friends as single tokens, and carries `TINY_TOOL_CHAT_TEMPLATE` with its `response_template`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hello_agents_rl.rollouts.template import TINY_TOOL_CHAT_TEMPLATE, TOOL_RESPONSE_TEMPLATE

TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
_CORPUS = [
    "user\nWhat is 347 * 56?", "assistant\n", "Final Answer: 19432", "The answer is #### \\boxed{}",
    "Tools: calculator python. Call one as", '{"name": "calculator", "arguments": {"expression": "347 * 56"}}',
    '{"name": "python", "arguments": {"code": "print(1)"}}', "347 * 56 is about 347 * 60 = 20820.",
    "system\nSolve the math problem step by step. End with 'Final Answer: <number>'.",
]


def tool_tokenizer(corpus: tuple[str, ...] = (), vocab_size: int = 400) -> Any:
    """Byte-level BPE (digits split, one token each), the chat specials first, tool markers as tokens; `corpus`:
    a task's own text to merge on as well (the lookups task's names would otherwise be spelt byte by byte)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,  # no blank lines on stdout
    )
    core.train_from_iterator((_CORPUS + list(corpus)) * 20, trainer=trainer)
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])  # kept when decoding
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=TINY_TOOL_CHAT_TEMPLATE,
    )
    tokenizer.response_template = TOOL_RESPONSE_TEMPLATE
    return tokenizer


def build_tiny_tool_model(out_dir: str | Path, seed: int = 0, corpus: tuple[str, ...] = (), vocab_size: int = 400
                          ) -> Path:
    """A ~1M-parameter random Qwen3 whose tokenizer and chat template can express tool calls (`corpus`,
    `vocab_size`: tool_tokenizer's)."""
    import torch
    from transformers import AutoModelForCausalLM

    from hello_agents_rl.models.tiny import build_tiny_model

    out = build_tiny_model(out_dir, seed=seed)  # the architecture; its embeddings are resized below
    tokenizer = tool_tokenizer(corpus, vocab_size)
    model = AutoModelForCausalLM.from_pretrained(out)
    torch.manual_seed(seed)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):  # the specials keep ids 0..2
        assert getattr(model.config, name) == tokenizer.convert_tokens_to_ids(getattr(tokenizer, name.replace("_id", "")))
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return Path(out)
