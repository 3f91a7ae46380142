"""Models: loading (hub id, folder, adapter, GGUF), LoRA, the prompt a model knows, and the tiny models."""

from hello_agents_rl.models.gguf import gguf_cache_dir, import_gguf
from hello_agents_rl.models.hub import safetensors_problem
from hello_agents_rl.models.loading import CHAT_TEMPLATE, load_model, load_tokenizer, lora_config, pick_device_dtype
from hello_agents_rl.models.prompt_settings import (
                                                     PROMPT_SETTINGS,
                                                     recorded_prompt,
                                                     save_prompt_settings,
                                                     system_prompt_of,
                                                     with_recorded_prompt,
)
from hello_agents_rl.models.sources import is_adapter_dir, resolve_model_source
from hello_agents_rl.models.tiny import build_tiny_model

__all__ = [
    "CHAT_TEMPLATE", "PROMPT_SETTINGS", "build_tiny_model", "gguf_cache_dir", "import_gguf", "is_adapter_dir",
    "load_model", "load_tokenizer", "lora_config", "pick_device_dtype", "recorded_prompt", "resolve_model_source",
    "safetensors_problem", "save_prompt_settings", "system_prompt_of", "with_recorded_prompt",
]
