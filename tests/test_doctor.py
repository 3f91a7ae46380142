"""Each of the book's troubleshooting rules fires on a stream made to trip it, once, and not on a healthy run."""

from __future__ import annotations

import math

import pytest

from hello_agents_rl.trainers.doctor import Doctor


def _run(stream: list[dict]) -> list[str]:
    doctor = Doctor(learning_rate=5e-5, kl_coef=0.05, max_new_tokens=256)
    for step, logs in enumerate(stream, start=1):
        doctor.observe(step, logs)
    return doctor.findings


def healthy(n: int = 20) -> list[dict]:
    return [{"reward": 0.2 + 0.03 * i, "kl": 0.01 + 0.002 * i, "loss": 0.1, "frac_reward_zero_std": 0.3,
             "completions/clipped_ratio": 0.05, "format": 0.9} for i in range(n)]


def test_healthy_run_is_silent() -> None:
    assert _run(healthy()) == []


LR, BETA = "learning_rate (now 5e-05)", "kl_coef (now 0.05)"
# (rule, how to trip it, what it found, the remedy the book gives for it)
RULES = [
    ("kl_high", lambda s: [{**e, "kl": 0.62} for e in s], "KL 0.62 > 0.5 for 3 logs: the policy is drifting",
     f"lower {LR} or raise {BETA}"),
    ("kl_low", lambda s: [{**e, "kl": 0.0002} for e in s], "KL 0.0002 < 0.001", f"raise {LR} or lower {BETA}"),
    ("flat", lambda s: [{**e, "reward": 0.40} for e in s], "reward flat at 0.4", f"raise {LR}, lower {BETA}"),
    ("collapse", lambda s: s[:10] + [{**e, "reward": 0.1} for e in s[10:]], "reward fell from",
     f"lower {LR}, raise {BETA}, or train fewer epochs"),
    ("zero_variance", lambda s: [{**e, "frac_reward_zero_std": 1.0} for e in s], "identical rewards",
     "raise temperature/num_generations"),
    ("truncated", lambda s: [{**e, "completions/clipped_ratio": 0.8} for e in s], "hit max_new_tokens (256)",
     "raise max_new_tokens or reward shorter answers (length_penalty)"),
    ("format_drop", lambda s: s[:5] + [{**e, "format": 0.4} for e in s[5:]], "format rate fell to 40%",
     f"use a combined reward with format terms, raise {BETA}"),
    ("nan", lambda s: s[:4] + [{**s[4], "loss": math.nan}] + s[5:], "loss is nan at step 5",
     f"lower {LR}, keep max_grad_norm on"),
]


@pytest.mark.parametrize(("name", "trip", "message", "remedy"), RULES, ids=[r[0] for r in RULES])
def test_rule_fires_once_with_the_remedy(name: str, trip, message: str, remedy: str) -> None:
    findings = _run(trip(healthy()))
    matching = [f for f in findings if message in f]
    assert len(matching) == 1, findings
    assert remedy in matching[0].split(message, 1)[1], matching[0]  # this rule's own advice, after what it found


def test_rule_rearms_after_the_condition_clears() -> None:
    stream = healthy(12)
    for i in (0, 1, 2, 8, 9, 10):
        stream[i] = {**stream[i], "kl": 0.9}
    assert sum("KL 0.9 > 0.5" in f for f in _run(stream)) == 2


def test_thresholds_are_configurable() -> None:
    from hello_agents_rl.config import Thresholds

    doctor = Doctor(5e-5, 0.05, 256, Thresholds(kl_high=0.02, patience=1))
    assert doctor.observe(1, {"kl": 0.03}) and "0.02" in doctor.findings[0]


def test_thresholds_from_the_config() -> None:
    from hello_agents_rl import ConfigError
    from hello_agents_rl.workflows.actions import parse

    assert parse({"doctor_thresholds": {"kl_high": 0.3}, "output_dir": "/tmp/x"}).doctor_thresholds == {"kl_high": 0.3}
    with pytest.raises(ConfigError, match="doctor_thresholds.kl_hgh.*kl_high"):
        parse({"doctor_thresholds": {"kl_hgh": 0.3}, "output_dir": "/tmp/x"})


def test_remedies_quote_the_values_as_logged() -> None:
    """The scheduler and adaptive KL move learning_rate and beta: advice quotes where they are now."""
    doctor = Doctor(learning_rate=5e-5, kl_coef=0.05, max_new_tokens=256)
    for step in range(1, 4):
        logs = {"kl": 0.62, "reward": 0.1 * step, "loss": 0.1, "learning_rate": 2.5e-05, "kl_coef": 0.1125}
        doctor.observe(step, logs)
    (finding,) = doctor.findings
    assert "lower learning_rate (now 2.5e-05) or raise kl_coef (now 0.1125)" in finding, finding


def _blow_up(lr: float = 0.05) -> list[dict]:
    """learning_rate 5e-2 on the tiny model: reward stuck at 0 while KL runs away."""
    kls = [0.0, 0.02, 0.05, 0.09, 0.15, 0.3, 0.55, 0.757, 0.9, 1.2]
    return [{"reward": 0.0, "kl": kl, "loss": 0.01, "learning_rate": lr, "kl_coef": 0.05} for kl in kls]


def test_flat_reward_while_kl_is_high_never_says_raise_the_rate() -> None:
    findings = _run(_blow_up())
    assert any("KL 0.9 > 0.5" in f and "lower learning_rate (now 0.05)" in f for f in findings), findings
    flat = [f for f in findings if "reward flat" in f]
    assert len(flat) == 1 and "lower learning_rate (now 0.05)" in flat[0], findings
    assert not any("raise learning_rate" in f for f in findings), findings


def test_flat_reward_after_a_nan_says_lower_the_rate() -> None:
    stream = [{"reward": 0.3, "kl": 0.02, "loss": 0.1}] * 3 + [{"reward": 0.3, "kl": 0.02, "loss": math.nan}]
    stream += [{"reward": 0.3, "kl": 0.02, "loss": 0.1}] * 6
    findings = _run(stream)
    flat = [f for f in findings if "reward flat" in f]
    assert len(flat) == 1 and "lower learning_rate" in flat[0] and "raise learning_rate" not in flat[0], findings


def test_flat_reward_on_a_calm_run_still_says_raise_the_rate() -> None:
    findings = _run([{"reward": 0.0, "kl": 0.01, "loss": 0.1, "learning_rate": 1e-6}] * 10)
    assert any("reward flat at 0" in f and "raise learning_rate (now 1e-06)" in f for f in findings), findings


def test_flat_reward_after_a_collapse_says_lower_the_rate() -> None:
    stream = [{"reward": 0.2 + 0.1 * i, "kl": 0.02, "loss": 0.1} for i in range(6)]  # up to 0.7
    stream += [{"reward": 0.1, "kl": 0.02, "loss": 0.1}] * 8  # fell and stays there
    findings = _run(stream)
    assert any("reward fell from 0.7 to 0.1" in f for f in findings), findings
    assert not any("raise learning_rate" in f for f in findings), findings


# SmolLM2-135M, GRPO at lr 1e-4 after SFT (docs/real_model.md): reward and KL as logged every 5 steps.
SMOLLM2_SLIDE = [(1, 1.00, 0.0), (5, 0.92, 0.0008), (10, 0.96, 0.0003), (15, 0.96, 0.0005), (20, 0.86, 0.0080),
                 (25, 0.86, 0.0074), (30, 0.78, 0.0194)]


def test_a_slow_slide_is_reported_with_its_remedy() -> None:
    doctor = Doctor(learning_rate=1e-4, kl_coef=0.05, max_new_tokens=32)
    for step, reward, kl in SMOLLM2_SLIDE:
        doctor.observe(step, {"reward": reward, "kl": kl, "loss": 0.01})
    slides = [f for f in doctor.findings if "reward sliding" in f]
    assert len(slides) == 1, doctor.findings
    assert slides[0].startswith("[step 25]") and "lower learning_rate (now 0.0001)" in slides[0]
    # the collapse rule alone (best - now > 0.2) stayed quiet on this curve: the slide rule is what reports it
    assert not [f for f in doctor.findings if "reward fell" in f]


def test_a_rising_noisy_reward_is_no_slide() -> None:
    rising = [0.30, 0.45, 0.40, 0.55, 0.50, 0.62, 0.58, 0.70, 0.64, 0.75, 0.70, 0.80]
    doctor = Doctor(learning_rate=1e-4, kl_coef=0.05, max_new_tokens=32)
    for step, reward in enumerate(rising, start=1):
        doctor.observe(step, {"reward": reward, "kl": 0.01, "loss": 0.1})
    assert not [f for f in doctor.findings if "sliding" in f]


def test_a_low_kl_under_lora_points_to_loras_learning_rates() -> None:
    """LoRA wants ~10x the full-fine-tuning rate: at 1e-5 with LoRA the advice names the LoRA default."""
    low_kl = [{**e, "kl": 0.0002} for e in healthy()]
    found = {}
    for use_lora, rate in ((True, 1e-5), (False, 1e-5), (True, 1e-4)):
        doctor = Doctor(learning_rate=rate, kl_coef=0.05, max_new_tokens=256, use_lora=use_lora)
        for step, logs in enumerate(low_kl, start=1):
            doctor.observe(step, logs)
        found[(use_lora, rate)] = [f for f in doctor.findings if "KL 0.0002 < 0.001" in f]
    assert all(len(f) == 1 for f in found.values()), found
    assert "with LoRA, GRPO learns near 0.0001" in found[(True, 1e-5)][0]
    assert "LoRA" not in found[(False, 1e-5)][0] and "LoRA" not in found[(True, 1e-4)][0]  # full FT; already there


@pytest.mark.parametrize(("mode", "remedy"), [("off", "set dynamic_sampling: resample"), ("skip", "set dynamic_sampling: resample"),
                                              ("resample", "raise dynamic_sampling_rounds")])
def test_identical_rewards_name_dynamic_sampling(mode: str, remedy: str) -> None:
    doctor = Doctor(learning_rate=5e-5, kl_coef=0.05, max_new_tokens=256, dynamic_sampling=mode)
    for step, logs in enumerate(healthy(6), start=1):
        doctor.observe(step, {**logs, "frac_reward_zero_std": 1.0})
    (finding,) = [f for f in doctor.findings if "identical rewards" in f]
    assert remedy in finding


def test_an_sft_run_that_learnt_nothing_says_so_and_one_that_learnt_stays_silent(tiny_model: str, tmp_path) -> None:
    from hello_agents_rl.config import Thresholds
    from hello_agents_rl.interfaces.tool import RLTrainingTool
    from hello_agents_rl.trainers.doctor import sft_learnt_nothing

    assert sft_learnt_nothing(0.45, 395, Thresholds()) is None  # a model that copies part of its examples
    # one SFT step with LoRA from random weights: the loss is still a uniform guess's, ln(vocabulary)
    result = RLTrainingTool().run({"action": "train", "algorithm": "sft", "model_name": tiny_model, "max_steps": 1,
                                   "batch_size": 2, "max_samples": 4, "dataset": "multiplication", "output_dir": str(tmp_path / "run"),
                                   "report_to": "none", "tools": []})  # its transcripts as text: no tool template
    assert result["status"] == "completed"
    (finding,) = [d for d in result["diagnostics"] if d.startswith("SFT's final loss")]
    assert "learnt next to nothing" in finding and "use_lora: false" in finding
