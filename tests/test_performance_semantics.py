"""The speed-ups keep TRL's semantics (trainers/fast/sampling/, trainers/fast/, docs/performance.md).

The fast sampler and the shared-prompt forwards must produce what the slow paths produce: the same
greedy tokens as `model.generate`, the log-probabilities TRL's training forward computes, the same
gradients, EOS and max_new_tokens respected, and the same completions for the same seed.
"""

from __future__ import annotations

import pytest
import torch
from module_path import module_path_logps

from hello_agents_rl.trainers.fast import FastGRPOTrainer, gate, use_fast_dropout
from hello_agents_rl.trainers.fast.buckets import length_buckets
from hello_agents_rl.trainers.fast.dropout import FastDropout
from hello_agents_rl.trainers.fast.sampling import (
    FastDecoder,
    fast_decoder_or_reason,
    no_active_dropout,
    sample,
    sampler,
    score,
)
from hello_agents_rl.trainers.fast.sampling.decoder import architecture_blocker
from hello_agents_rl.trainers.fast.sampling.sampler import filter_logits
from hello_agents_rl.trainers.fast.verified import ENV_SWITCH, verified_versions_text

TEMPERATURE = 0.8


def _lora(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """model under a LoRA adapter whose B is non-zero (a fresh adapter is an exact no-op)."""
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear",
                                            task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return peft.eval()


@pytest.fixture(scope="module")
def tiny(tiny_model: str) -> tuple:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))  # what GRPOTrainer does
    return _lora(model), tokenizer


def _prompts(tokenizer, n: int = 3, repeat: int = 2) -> list[list[int]]:
    texts = ["What is 48 + 7?", "What is 3 + 4?", "Add 15 and 9, then tell me the result please."][:n]
    ids = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"] for t in texts]
    return [list(p) for p in ids for _ in range(repeat)]  # ragged lengths, each prompt repeated (a GRPO group)


def _ids(tokenizer) -> dict:
    return {"eos_token_ids": [tokenizer.convert_tokens_to_ids("<|im_end|>")], "pad_token_id": tokenizer.pad_token_id}


def _full_forward_logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """TRL's training forward for one row: fused LM head, labels on the completion only."""
    ids = torch.tensor([prompt + completion])
    labels = ids.clone()
    labels[:, : len(prompt)] = -100
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    return out.log_probs[0, -len(completion):]


def test_sampled_logprobs_equal_the_training_forward(tiny: tuple) -> None:
    model, tokenizer = tiny
    torch.manual_seed(0)
    completions, logprobs = sample(model, _prompts(tokenizer), 24, temperature=TEMPERATURE, **_ids(tokenizer))
    for prompt, completion, logp in zip(_prompts(tokenizer), completions, logprobs):
        assert len(logp) == len(completion) > 0
        torch.testing.assert_close(torch.tensor(logp), _full_forward_logps(model, prompt, completion), atol=1e-4, rtol=0)


@pytest.mark.parametrize("fuse", [True, False])
def test_greedy_equals_model_generate(tiny: tuple, fuse: bool) -> None:
    model, tokenizer = tiny
    prompts = _prompts(tokenizer, repeat=1)
    decoder = FastDecoder(model, fuse=fuse)
    ours, _ = sample(model, prompts, 20, temperature=0.0, decoder=decoder, **_ids(tokenizer))
    eos = _ids(tokenizer)["eos_token_ids"][0]
    for prompt, completion in zip(prompts, ours):
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=20, do_sample=False, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
        assert completion == out[0, len(prompt):].tolist()


def test_same_seed_same_completions_and_limits(tiny: tuple) -> None:
    model, tokenizer = tiny
    ids = _ids(tokenizer)
    eos = ids["eos_token_ids"][0]
    runs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        runs.append(sample(model, _prompts(tokenizer), 12, temperature=1.0, top_p=0.9, top_k=50, **ids)[0])
    assert runs[0] == runs[1], "the same seed gives the same completions"
    assert runs[0] != runs[2]
    for completions in runs:
        for completion in completions:
            assert 0 < len(completion) <= 12, "never more than max_new_tokens"
            assert eos not in completion[:-1], "generation stops at the first EOS"
            assert completion[-1] == eos or len(completion) == 12, "ends at EOS or at the length limit"


def test_kv_cache_grows_past_its_reservation(tiny: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = tiny
    ids = {**_ids(tokenizer), "eos_token_ids": [tokenizer.pad_token_id]}  # an EOS it never samples: runs to the limit
    torch.manual_seed(3)
    reference = sample(model, _prompts(tokenizer, 1, 2), 40, temperature=TEMPERATURE, **ids)
    monkeypatch.setattr(sampler, "KV_RESERVE", 3)
    torch.manual_seed(3)
    assert sample(model, _prompts(tokenizer, 1, 2), 40, temperature=TEMPERATURE, **ids) == reference


@pytest.mark.parametrize(
    ("row", "top_k", "top_p", "kept"),
    [
        ([2.0, 1.0, 1.0, 1.0, 0.0, -1.0], 2, 1.0, 4),  # the 2nd largest is tied three ways: top-k keeps all three
        ([3.0, 3.0, 1.0, 1.0, 1.0, 0.0], 3, 1.0, 5),
        ([0.0, 0.0, 0.0, 0.0], None, 0.5, 2),  # cumulative 0.25, 0.5 (exactly 1 - top_p: removed), 0.75, 1
        ([0.0, 0.0, 0.0, 0.0], None, 0.75, 3),
        ([0.0, 0.0, 0.0, 0.0, -30.0], 3, 0.5, 2),  # a tie at both boundaries
        ([1.0, 1.0, 0.0], None, 1e-6, 1),  # top-p keeps at least one token, even from a tie
    ],
)
def test_filter_matches_transformers_warpers(row: list[float], top_k: int | None, top_p: float, kept: int) -> None:
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    logits = torch.tensor([row])
    expected = logits.clone()
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1.0:
        expected = TopPLogitsWarper(top_p)(None, expected)
    assert int(torch.isfinite(expected).sum()) == kept, "the case is the tie it is written for"
    assert torch.equal(filter_logits(logits, top_k, top_p), expected)


def test_filter_matches_transformers_warpers_on_random_logits() -> None:
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 3
    top = logits.topk(12).indices
    logits.scatter_(1, top[:, 10:], logits.gather(1, top[:, 9:10]).expand(-1, 2))  # the 10th largest tied 3 ways
    expected = TopPLogitsWarper(0.95)(None, TopKLogitsWarper(10)(None, logits.clone()))
    assert torch.equal(filter_logits(logits, 10, 0.95), expected)


def _batch(tokenizer, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A TRL-shaped batch: left-padded repeated prompts + right-padded completions, rows shuffled."""
    generator = torch.Generator().manual_seed(seed)
    prompts = _prompts(tokenizer, 3, 4)
    width = max(map(len, prompts))
    completions = [torch.randint(5, 300, (int(n),), generator=generator).tolist() for n in torch.randint(1, 9, (12,), generator=generator)]
    c_width = max(map(len, completions))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p + c + [tokenizer.pad_token_id] * (c_width - len(c))
                        for p, c in zip(prompts, completions)])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * (len(p) + len(c)) + [0] * (c_width - len(c))
                         for p, c in zip(prompts, completions)])
    order = torch.randperm(len(prompts), generator=generator)  # TRL shuffles rows before slicing batches
    return ids[order], mask[order], c_width


def _trl_forward(model, ids, mask, keep) -> tuple[torch.Tensor, torch.Tensor]:
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def test_the_module_path_oracle_equals_trls_full_forward(tiny: tuple) -> None:
    """tests/module_path.py (the functional forward's oracle under live dropout) is TRL's forward, values and
    gradients."""
    model, tokenizer = tiny
    ids, mask, keep = _batch(tokenizer)
    loss_mask = mask[:, -keep:]
    grads = []
    for forward in (_trl_forward, lambda *a: module_path_logps(*a, compute_entropy=True)):
        model.zero_grad()
        logps, entropy = forward(model, ids, mask, keep)
        (logps * loss_mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
        if forward is _trl_forward:
            expected = (logps.detach() * loss_mask, entropy.detach() * loss_mask)
        else:
            torch.testing.assert_close(logps.detach() * loss_mask, expected[0], atol=1e-4, rtol=0)
            torch.testing.assert_close(entropy.detach() * loss_mask, expected[1], atol=1e-4, rtol=0)
    model.zero_grad()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-3)


def test_functional_scoring_equals_policy_and_reference_forward(tiny: tuple) -> None:
    model, tokenizer = tiny
    ids, mask, keep = _batch(tokenizer, seed=1)
    with torch.no_grad():
        policy = score(FastDecoder(model), ids, mask, keep, TEMPERATURE)
        torch.testing.assert_close(policy, _trl_forward(model, ids, mask, keep)[0] * mask[:, -keep:], atol=1e-4, rtol=0)
        with model.disable_adapter():  # how TRL gets the reference of a LoRA policy
            reference = score(FastDecoder(model), ids, mask, keep, TEMPERATURE)
            expected = _trl_forward(model, ids, mask, keep)[0] * mask[:, -keep:]
        torch.testing.assert_close(reference, expected, atol=1e-4, rtol=0)
    assert not torch.allclose(policy, reference), "the adapter matters, so the check above means something"


def test_dropout_gates_the_functional_scoring(tiny: tuple) -> None:
    model, _ = tiny
    model.train()
    try:
        assert not no_active_dropout(model), "LoRA dropout is live in train mode: keep TRL's stochastic forward"
        with model.disable_adapter():
            assert no_active_dropout(model), "the reference has no LoRA branch, so no dropout"
    finally:
        model.eval()
    assert no_active_dropout(model)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_other_llama_family_models(kind: str, tiny: tuple) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    _, tokenizer = tiny
    config = AutoConfig.for_model(kind, vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                  pad_token_id=tokenizer.pad_token_id)  # qwen2: q/k/v biases; llama: none
    torch.manual_seed(0)
    model = _lora(AutoModelForCausalLM.from_config(config))
    prompts = _prompts(tokenizer, repeat=1)
    ours, _ = sample(model, prompts, 10, temperature=0.0, **_ids(tokenizer))
    for prompt, completion in zip(prompts, ours):
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=10, do_sample=False, eos_token_id=_ids(tokenizer)["eos_token_ids"][0],
                                 pad_token_id=tokenizer.pad_token_id)
        assert completion == out[0, len(prompt):].tolist()


def test_unsupported_models_fall_back(tiny: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100))
    decoder, reason = fast_decoder_or_reason(gpt2)
    assert decoder is None and "gpt2" in reason
    assert architecture_blocker(gpt2.config) is not None
    model, _ = tiny
    assert architecture_blocker(model.get_base_model().config) is None
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert gate.class_blocker(object) == f"{ENV_SWITCH}=0", "the switch turns every fast path off"


def test_fast_dropout_is_dropout() -> None:
    dropout = FastDropout(0.05).train()
    x = torch.ones(400_000, requires_grad=True)
    y = dropout(x)
    kept = y != 0
    assert abs((1 - kept.float().mean().item()) - 0.05) < 0.002, "drops each element with probability ~p"
    assert torch.allclose(y[kept], torch.full_like(y[kept], dropout.scale)), "survivors scaled by 1/(1-p)"
    assert abs(dropout.scale * (1 - dropout.threshold / 2**dropout.BITS) - 1) < 1e-12, "so the expectation is exact"
    y.sum().backward()
    assert torch.equal(x.grad, y.detach()), "the gradient is the same mask and scale"
    assert not torch.equal(dropout(x), y), "a fresh mask every call"
    assert dropout.eval()(x) is x, "identity in eval mode"


def test_fast_dropout_replaces_only_lora_dropouts(tiny_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM

    model = _lora(AutoModelForCausalLM.from_pretrained(tiny_model))
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert use_fast_dropout(model) == 0
    monkeypatch.delenv(ENV_SWITCH)
    assert use_fast_dropout(model) == 4 * 7, "q k v o gate up down in each of the 4 layers"
    assert not any(type(m) is torch.nn.Dropout and m.p > 0 for m in model.modules())
    assert not any("lora_dropout" in k for k in model.state_dict()), "nothing new is saved with the adapter"


def test_length_buckets_keep_every_row_once() -> None:
    lengths = [18, 17, 19, 128, 18, 20, 3, 18]
    buckets = length_buckets(lengths)
    assert sorted(r for rows, _ in buckets for r in rows) == list(range(len(lengths)))
    assert all(max(lengths[r] for r in rows) == width for rows, width in buckets)
    assert [w for _, w in buckets][-1] == 128 and len(buckets[-1][0]) == 1, "the outlier does not pad the others"
    assert length_buckets([18] * 16) == [(list(range(16)), 18)]


def test_trainer_logps_equal_trls_own(tiny_model: str, tmp_path) -> None:
    """The trainer's override (buckets + shared prompts + functional reference) against TRL's method."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "What is 1 + 2?"}]] * 4})
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=1,
                      report_to="none", use_cpu=True, bf16=False, gradient_checkpointing=False, temperature=TEMPERATURE)
    trainer = FastGRPOTrainer(
        model=tiny_model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args, train_dataset=data,
        peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM"))
    model = trainer.model
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    model.eval()  # no dropout: the two paths must agree exactly
    tokenizer = trainer.processing_class
    ids, mask, keep = _batch(tokenizer, seed=2)
    mask[0, -keep:] = 1  # one completion runs to the end: a bucket of its own
    ours = trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, compute_entropy=True)
    theirs = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, keep, compute_entropy=True)
    loss_mask = mask[:, -keep:]
    torch.testing.assert_close(ours[0] * loss_mask, theirs[0] * loss_mask, atol=1e-4, rtol=0)
    torch.testing.assert_close(ours[1] * loss_mask, theirs[1] * loss_mask, atol=1e-4, rtol=0)
    assert ours[0].requires_grad
    with torch.no_grad(), model.disable_adapter():  # the reference forward
        ours = trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, batch_size=5)[0]
        theirs = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, keep, batch_size=5)[0]
    torch.testing.assert_close(ours * loss_mask, theirs * loss_mask, atol=1e-4, rtol=0)


# --- the trainer's own paths: dropout, generation config, version guard (issue 10, items 6, 7, 9) -------------


def _fast_trainer(tiny_model: str, tmp_path, dropout: float = 0.0, **args):
    """FastGRPOTrainer on the tiny Qwen3 under LoRA (B randomised: a fresh adapter is a no-op), in train mode."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "What is 1 + 2?"}]] * 4})
    args = GRPOConfig(**{"output_dir": str(tmp_path), "per_device_train_batch_size": 4, "num_generations": 2,
                         "max_steps": 1, "report_to": "none", "use_cpu": True, "bf16": False,
                         "gradient_checkpointing": False, "temperature": TEMPERATURE, **args})
    trainer = FastGRPOTrainer(
        model=tiny_model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args, train_dataset=data,
        peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=dropout, target_modules="all-linear",
                               task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    trainer.model.train()  # as during training: TRL computes old-policy log-probs and rollouts in train mode
    return trainer


def test_old_policy_logps_keep_fast_dropout_live(tiny_model: str, tmp_path) -> None:
    """TRL computes old-policy log-probs (steps_per_generation != gradient accumulation) under no_grad in train
    mode, LoRA dropout live. With the default dropout on CPU that dropout is FastDropout: our forward must keep it
    live too, not swap in the deterministic functional scorer."""
    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05)
    model = trainer.model
    assert sum(isinstance(m, FastDropout) for m in model.modules()) == 4 * 7
    ids, mask, keep = _batch(trainer.processing_class, seed=3)
    loss_mask = mask[:, -keep:]
    with torch.no_grad():
        draws = [trainer._get_per_token_logps_and_entropies(model, ids, mask, keep)[0] * loss_mask for _ in range(2)]
        assert not torch.allclose(draws[0], draws[1]), "dropout is live, as in TRL's forward: two draws differ"
        with model.disable_adapter():  # the reference has no LoRA branch, so no dropout: deterministic, exact
            reference = [trainer._get_per_token_logps_and_entropies(model, ids, mask, keep)[0] * loss_mask
                         for _ in range(2)]
        torch.testing.assert_close(reference[0], reference[1], atol=0, rtol=0)
    assert not no_active_dropout(model)
    model.eval()
    assert no_active_dropout(model)


def _neither_repeats_nor_prompt(prompt: list[int], completion: list[int]) -> bool:
    return len(set(completion)) == len(completion) and not set(completion) & set(prompt)


BANNED = list(range(3, 320, 2))  # half the tiny vocabulary (never EOS 2 or pad 0): the sampler would pick them


@pytest.mark.parametrize(
    "field, value, holds",
    [
        ("no_repeat_ngram_size", 1, _neither_repeats_nor_prompt),
        ("bad_words_ids", [[t] for t in BANNED], lambda prompt, completion: not set(completion) & set(BANNED)),
    ],
)
def test_rollouts_honour_the_models_generation_config(tiny_model: str, tmp_path, capsys, caplog, field, value,
                                                      holds) -> None:
    """generate() applies every generation_config field TRL leaves unset; the fast sampler does not implement
    these, so the rollouts must go to model.generate (the constraint holds), with the reason recorded and printed
    once."""
    trainer = _fast_trainer(tiny_model, tmp_path, max_completion_length=16)
    setattr(trainer.model.get_base_model().generation_config, field, value)
    prompts = _prompts(trainer.processing_class, 2, 4)
    for _ in range(2):
        completions, _ = trainer._generate_single_turn(prompts, None, {}, 4)
        assert all(holds(p, c) for p, c in zip(prompts, completions)), f"the model's {field} was not applied"
    record = trainer.fast_path
    assert record["counts"]["generate_completions"] == 16 and record["counts"].get("sampler_completions", 0) == 0
    assert record["sampler"] is False
    assert [(f["part"], f["times"]) for f in record["fallbacks"]] == [("sampler", 16)]
    assert field in record["fallbacks"][0]["reason"]
    assert capsys.readouterr().out.count(field) == 1, "the fallback is printed, once"
    assert sum(field in r.getMessage() and r.levelname == "WARNING" for r in caplog.records) == 1, "and logged once"


def test_model_sampling_defaults_trl_overrides_keep_the_sampler(tiny_model: str, tmp_path) -> None:
    """Qwen3's shipped generation_config (temperature, top_k, top_p, do_sample) is overridden by TRL's explicit
    values in generate too: no reason to leave the fast sampler."""
    trainer = _fast_trainer(tiny_model, tmp_path, max_completion_length=8)
    trainer.model.get_base_model().generation_config.update(do_sample=True, temperature=0.6, top_k=20, top_p=0.95)
    trainer._generate_single_turn(_prompts(trainer.processing_class, 2, 2), None, {}, 2)
    assert trainer.fast_path["counts"]["sampler_completions"] == 4 and trainer.fast_path["fallbacks"] == []


def test_unverified_library_versions_fall_back_to_trl(tiny_model: str, tmp_path, monkeypatch, capsys) -> None:
    """The fast path reads TRL/transformers/PEFT internals: outside the versions it was verified against it runs
    plain TRL (no FastDropout, TRL's generate and forwards) and says so, naming the versions."""
    import importlib.metadata

    from trl import GRPOTrainer

    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.99.0" if name == "trl" else real_version(name))
    calls = []
    trl_rollout = GRPOTrainer._generate_single_turn
    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn",
                        lambda self, *a, **k: calls.append(1) or trl_rollout(self, *a, **k))
    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05, max_completion_length=8)
    assert not any(isinstance(m, FastDropout) for m in trainer.model.modules()), "PEFT's own dropout kept"
    trainer._generate_single_turn(_prompts(trainer.processing_class, 2, 2), None, {}, 2)
    assert calls == [1], "TRL's own rollout ran"
    record = trainer.fast_path
    assert record["sampler"] is False and record["counts"]["generate_completions"] == 4
    reasons = [f["reason"] for f in record["fallbacks"] if f["part"] == "all"]
    assert len(reasons) == 1 and "trl 1.99.0" in reasons[0] and verified_versions_text() in reasons[0]
    assert "trl 1.99.0" in capsys.readouterr().out


def test_a_renamed_trl_method_turns_the_fast_path_off_visibly(tiny_model: str, tmp_path, monkeypatch) -> None:
    """If TRL renamed a method we override, our override would silently never run: the trainer checks at start."""
    from trl import GRPOTrainer

    monkeypatch.delattr(GRPOTrainer, "_generate_single_turn")
    trainer = _fast_trainer(tiny_model, tmp_path, max_completion_length=8)
    reasons = [f["reason"] for f in trainer.fast_path["fallbacks"] if f["part"] == "all"]
    assert len(reasons) == 1 and "_generate_single_turn" in reasons[0]
