"""Loading a model and its tokenizer (hub id, folder, adapter, GGUF), the device and dtype, LoRA's config."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.models.hub import check_weights, from_pretrained
from hello_agents_rl.models.sources import is_adapter_dir, resolve_model_source
from hello_agents_rl.paths import looks_like_local_path

log = logging.getLogger(__name__)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)



def pick_device_dtype(train_all_weights: bool = False) -> tuple[str, torch.dtype]:
    """The device and the dtype to load weights in: fp32 on CPU (bf16 matmuls are slow there); bf16 on GPUs
    that support it. Older GPUs train under fp16 autocast with loss scaling (trainers.args.trl_args sets
    fp16=True), which needs fp32 trainable weights: full fine-tuning loads fp32; LoRA keeps the frozen base in
    fp16 (its adapters are fp32) and evaluation runs in fp16."""
    if not torch.cuda.is_available():
        return "cpu", torch.float32
    if torch.cuda.is_bf16_supported():
        return "cuda", torch.bfloat16
    return "cuda", torch.float32 if train_all_weights else torch.float16


def load_tokenizer(name: str, trust_remote_code: bool = False, key: str = "model_name") -> Any:
    """`key` is the parameter the user set (model_name, model_path): error messages name it."""
    from transformers import AutoTokenizer

    name = resolve_model_source(name)
    source = _base_of_adapter(name, key) if is_adapter_dir(name) and not _has_tokenizer(name) else name
    if Path(source).is_dir() and not _has_tokenizer(source):
        raise ConfigError(
            f"`{key}`: could not load Tokenizer from the folder {source}: it has no tokenizer files "
            "(tokenizer.json, tokenizer_config.json or tokenizer.model); copy them from the base model"
        )
    tokenizer = from_pretrained(AutoTokenizer, source, key, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not tokenizer.chat_template:
        log.warning("%s has no chat template; using the ChatML template (<|im_start|>role ... <|im_end|>)", name)
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def load_model(name: str, trust_remote_code: bool = False, dtype: torch.dtype | None = None, key: str = "model_name") -> Any:
    """A plain transformers model; a LoRA adapter folder is loaded onto its base and merged."""
    from transformers import AutoModelForCausalLM

    dtype = dtype or pick_device_dtype()[1]
    name = resolve_model_source(name)
    if trust_remote_code:
        log.warning("trust_remote_code is on: %s may run its own Python code", name)
    if is_adapter_dir(name):
        from peft import PeftModel

        base = from_pretrained(
            AutoModelForCausalLM, _base_of_adapter(name, key), key, dtype=dtype, trust_remote_code=trust_remote_code
        )
        check_weights(name, key)
        model = PeftModel.from_pretrained(base, name).merge_and_unload()
    else:
        model = from_pretrained(AutoModelForCausalLM, name, key, dtype=dtype, trust_remote_code=trust_remote_code)
    pick_threads(model)
    return model


# Below this many parameters a CPU run takes one torch thread: a small model's products are too short for a second
# thread to pay, and on a laptop doing other work, threads that spin-wait for a busy core stall every step
# (benchmarks/threads.py measures both; docs/performance.md). OMP_NUM_THREADS, or HELLO_AGENTS_THREADS=default,
# leaves the count to the user and torch.
SMALL_MODEL_PARAMETERS = 20_000_000
THREADS_SWITCH = "HELLO_AGENTS_THREADS"
_torch_default_threads: list[int] = []  # torch's own count, before any change of ours


def pick_threads(model: Any) -> int:
    """Set torch's CPU thread count for this model (one for a small one, torch's default otherwise); returns it."""
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get(THREADS_SWITCH) == "default":
        return torch.get_num_threads()
    if not _torch_default_threads:
        _torch_default_threads.append(torch.get_num_threads())
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    small = sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMETERS
    threads = 1 if on_cpu and small else _torch_default_threads[0]
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


def _has_tokenizer(folder: str) -> bool:
    return any((Path(folder) / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def _base_of_adapter(folder: str, key: str = "model_name") -> str:
    base = json.loads((Path(folder) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base or (looks_like_local_path(base) and not Path(base).expanduser().exists()):
        raise ConfigError(
            f"`{key}`: the LoRA adapter in {folder} needs its base model, which is missing (expected at {base!r}, "
            f"from base_model_name_or_path in its adapter_config.json); put the base model back there or point that "
            "entry at the base model's folder or hub id"
        )
    return resolve_model_source(base)


def lora_config(rank: int, alpha: int, dropout: float, target_modules: str | list[str]) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM"
    )
