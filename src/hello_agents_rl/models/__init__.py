"""Loading models (hub id, local folder, LoRA adapter folder, GGUF file), LoRA, and the tiny model factory."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.paths import looks_like_local_path

log = logging.getLogger(__name__)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def gguf_cache_dir() -> Path:
    """Where imported GGUF files are kept: $HELLO_AGENTS_CACHE/gguf (default ~/.cache/hello_agents_rl/gguf)."""
    return Path(os.environ.get("HELLO_AGENTS_CACHE") or "~/.cache/hello_agents_rl").expanduser() / "gguf"


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


def is_adapter_dir(path: str | Path) -> bool:
    folder = Path(path)
    return (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()


def resolve_model_source(name: str) -> str:
    """What transformers can load: a run's output_dir means its final model; GGUF becomes a cached folder."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        return str(import_gguf(path))
    for final in ("model", "adapter"):  # our training runs save their final model in these subfolders
        if path.is_dir() and not (path / "config.json").is_file() and (path / final).is_dir():
            return str(path / final)
    return str(path) if path.exists() else name


PROMPT_SETTINGS = "prompt_settings.json"  # beside the weights: the prompt a trained model knows


def save_prompt_settings(folder: str | Path, settings: dict[str, Any]) -> None:
    (Path(folder) / PROMPT_SETTINGS).write_text(json.dumps(settings, indent=2, ensure_ascii=False), encoding="utf-8")


def recorded_prompt(name: str) -> dict[str, Any] | None:
    """The prompt settings a run saved beside this model (a run folder, its model/ or adapter/), if any."""
    source = Path(resolve_model_source(name)) if not str(name).endswith(".gguf") else None
    file = source / PROMPT_SETTINGS if source is not None else None
    if file is None or not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        return None


def with_recorded_prompt(cfg: Any, model_name: str) -> tuple[Any, str]:
    """cfg with the model's recorded system prompt and thinking mode where the user set none; and where they came from."""
    recorded = recorded_prompt(model_name) or {}
    update = {key: recorded[key] for key in ("system_prompt", "enable_thinking")
              if key in recorded and key not in cfg.model_fields_set}
    if "system_prompt" in update:
        update["system_prompt"] = update["system_prompt"] or ""  # recorded None = no system message, not the default
    source = ("given" if "system_prompt" in cfg.model_fields_set else
              "recorded with the model" if "system_prompt" in update else "the dataset's default")
    return (cfg.model_copy(update=update) if update else cfg), source


def system_prompt_of(rows: Any) -> str | None:
    """The system message the rows' prompts carry (the same for every row of a dataset)."""
    first = rows[0]["prompt"] if len(rows) else []
    return next((m["content"] for m in first if m.get("role") == "system"), None)


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
    tokenizer = _from_pretrained(AutoTokenizer, source, key, trust_remote_code=trust_remote_code)
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

        base = _from_pretrained(
            AutoModelForCausalLM, _base_of_adapter(name, key), key, dtype=dtype, trust_remote_code=trust_remote_code
        )
        _check_weights(name, key)
        return PeftModel.from_pretrained(base, name).merge_and_unload()
    return _from_pretrained(AutoModelForCausalLM, name, key, dtype=dtype, trust_remote_code=trust_remote_code)


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


def safetensors_problem(file: Path) -> str | None:
    """Why a .safetensors file cannot be read (truncated, bad header), or None; reads the header only."""
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            header_length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(header_length))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"unreadable header: {error}"
    expected = 8 + header_length + end
    return f"{size} bytes where its header promises {expected}: cut short" if size < expected else None


def _check_weights(folder: str, key: str) -> None:
    """A truncated weights file (a full disk, an interrupted copy) named as such, not as a loader traceback."""
    for file in sorted(Path(folder).glob("*.safetensors")):
        if problem := safetensors_problem(file):
            raise ConfigError(f"`{key}`: {file} is damaged ({problem}); copy or save the model again")


def _from_pretrained(cls: Any, name: str, key: str = "model_name", **kwargs: Any) -> Any:
    """from_pretrained that fails fast with the fix instead of a hang or a bare traceback."""
    source = resolve_model_source(name)
    local = Path(source).exists()
    if local:
        _check_weights(source, key)
    try:
        return cls.from_pretrained(source, local_files_only=local or _offline(), **kwargs)
    except (OSError, ValueError) as error:
        where = f"the folder {source}" if local else f"the hub id {name!r}"
        if "trust_remote_code" in str(error):  # keep transformers' own explanation of custom code
            raise ConfigError(
                f"`{key}`: {source} needs its own Python code to load: {error} Set trust_remote_code: true only "
                "if you trust that code."
            ) from None
        raise ConfigError(
            f"`{key}`: could not load {cls.__name__.removeprefix('Auto')} from {where}: {str(error).splitlines()[0]} "
            f"Check the spelling, or download the model once and point {key} at its local folder "
            "(it needs config.json, weights and tokenizer files)."
        ) from None


def _offline() -> bool:
    """Offline by setting, or because the hub cannot be reached (then only the local cache is tried)."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false") or not _hub_reachable()


@functools.cache
def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick connection instead of huggingface_hub's retries with back-off (about a minute offline)."""
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def lora_config(rank: int, alpha: int, dropout: float, target_modules: str | list[str]) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM"
    )


def import_gguf(path: Path, out_dir: Path | None = None) -> Path:
    """Dequantize a GGUF file once into a trainable transformers folder (TRL refuses quantized GGUF models).

    Without out_dir the folder goes to the cache (gguf_cache_dir()), keyed by the file's path, size and
    mtime, so later runs (and the other ranks of a distributed run) reuse it.
    """
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"`model_name`: GGUF file {path} not found")
    digest = hashlib.sha256(f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    out = Path(out_dir).expanduser() if out_dir else gguf_cache_dir() / f"{path.stem}-{digest}"
    if (out / "config.json").is_file():
        log.info("using %s, imported earlier from %s", out, path)
        return out
    log.warning("dequantizing %s into the trainable model folder %s (once: later runs reuse it)", path, out)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    )
    if getattr(model, "hf_quantizer", None) is not None:  # plain dense weights now: save them as such
        model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)  # keeps the chat template
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))  # unique: ranks may import at once
    tmp.chmod(0o755)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out)  # atomic: a crash never leaves a half-written folder
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").is_file():
            raise ConfigError(f"import-gguf: {out} exists and is not empty; choose a new folder") from None
    log.warning("imported %s -> %s", path.name, out)
    return out


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
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
