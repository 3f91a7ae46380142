"""The fast sampler: rollouts from a functional view of a Llama-family decoder instead of `model.generate`.

For small and mid-sized models generate is mostly per-token Python overhead (mask building, cache objects,
logits processors, PEFT's LoRA wrappers). `FastDecoder` (decoder.py) is a functional view of the decoder:
LoRA merged into the weights once per rollout, q/k/v and gate/up fused, a preallocated growing KV cache
(kv_cache.py) with each distinct prompt prefilled once for its whole group and its keys read once per decode
step by all of the group's rows (attention.py). `sample` (sampler.py) draws
completions as transformers' temperature/top-k/top-p do, `sampler_settings` (settings.py) says what generate
would sample with or why the sampler cannot reproduce it, and `score` (scorer.py) gives log-probs of given
completions without gradients.
"""

from hello_agents_rl.trainers.fast.sampling.decoder import FastDecoder, Unsupported, fast_decoder_or_reason
from hello_agents_rl.trainers.fast.sampling.sampler import sample
from hello_agents_rl.trainers.fast.sampling.scorer import PACK_ROWS as SCORE_PACK_ROWS
from hello_agents_rl.trainers.fast.sampling.scorer import no_active_dropout, score
from hello_agents_rl.trainers.fast.sampling.settings import sampler_settings

__all__ = ["SCORE_PACK_ROWS", "FastDecoder", "Unsupported", "fast_decoder_or_reason", "no_active_dropout", "sample",
           "sampler_settings", "score"]
