"""What `model.generate` would sample with, as the fast sampler's settings, or why it cannot reproduce it."""

from __future__ import annotations

from typing import Any

from hello_agents_rl.trainers.fast.sampling.decoder import base_model

# GenerationConfig fields the fast sampler implements, or that do not change which tokens generate() samples:
# lengths and ids TRL sets, output formats, caching and compilation, beam-only knobs, assisted-decoding knobs
# (inert without an assistant). Any other field away from its neutral value sends the rollout to generate().
SAMPLER_FIELDS = frozenset({
    "do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "max_length", "eos_token_id", "pad_token_id",
    "bos_token_id", "decoder_start_token_id", "use_cache", "cache_implementation", "cache_config", "max_cache_len",
    "compile_config", "disable_compile", "prefill_chunk_size", "low_memory", "continuous_batching_config",
    "output_attentions", "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
    "renormalize_logits", "early_stopping", "length_penalty", "num_assistant_tokens", "num_assistant_tokens_schedule",
    "assistant_confidence_threshold", "assistant_lookbehind", "target_lookbehind", "max_matching_ngram_size",
    "transformers_version", "_from_model_config",
})


def sampler_settings(model: Any, requested: Any) -> tuple[dict[str, Any], str | None]:
    """What `model.generate(generation_config=requested)` samples with, as `sample()`'s temperature/top_p/top_k,
    or why the sampler cannot reproduce it. generate fills every field TRL's config leaves unset from the model's
    own generation_config (a checkpoint may ship min_p, no_repeat_ngram_size, bad_words_ids...): merge the same way.
    """
    from transformers import GenerationConfig

    base = base_model(model)
    merged, _ = base._prepare_generation_config(requested)  # generate's own merge: requested > model's > defaults
    blank = GenerationConfig()
    neutral = {**dict.fromkeys(blank.to_dict()), **blank._get_default_generation_params()}
    applied = []
    for name, default in neutral.items():
        value = getattr(merged, name, None)
        if name in SAMPLER_FIELDS or value == default or (default is None and value in ([], {}, ())):
            continue
        applied.append(f"{name}={value!r}"[:60])
    if applied:
        return {}, "generation_config " + ", ".join(applied)
    temperature = merged.temperature if merged.do_sample else 0.0  # generate: do_sample=False is greedy
    return {"temperature": temperature, "top_p": merged.top_p, "top_k": merged.top_k}, None
