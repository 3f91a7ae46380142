"""Each of the seed's troubleshooting rules fires on a stream made to trip it, once, and not on a healthy run."""

from __future__ import annotations

import math

import pytest

from hello_agents.rl.trainers.doctor import Doctor


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


RULES = [
    ("kl_high", lambda s: [{**e, "kl": 0.62} for e in s], "KL 0.62 > 0.5 for 3 logs: the policy is drifting"),
    ("kl_low", lambda s: [{**e, "kl": 0.0002} for e in s], "KL 0.0002 < 0.001"),
    ("flat", lambda s: [{**e, "reward": 0.40} for e in s], "reward flat at 0.4"),
    ("collapse", lambda s: s[:10] + [{**e, "reward": 0.1} for e in s[10:]], "reward fell from"),
    ("zero_variance", lambda s: [{**e, "frac_reward_zero_std": 1.0} for e in s], "identical rewards"),
    ("truncated", lambda s: [{**e, "completions/clipped_ratio": 0.8} for e in s], "hit max_new_tokens (256)"),
    ("format_drop", lambda s: s[:5] + [{**e, "format": 0.4} for e in s[5:]], "format rate fell to 40%"),
    ("nan", lambda s: s[:4] + [{**s[4], "loss": math.nan}] + s[5:], "loss is nan at step 5"),
]


@pytest.mark.parametrize(("name", "trip", "message"), RULES, ids=[r[0] for r in RULES])
def test_rule_fires_once_with_the_remedy(name: str, trip, message: str) -> None:
    findings = _run(trip(healthy()))
    matching = [f for f in findings if message in f]
    assert len(matching) == 1, findings
    assert any(hint in matching[0] for hint in ("now 5e-05", "now 0.05", "max_new_tokens", "identical"))


def test_rule_rearms_after_the_condition_clears() -> None:
    stream = healthy(12)
    for i in (0, 1, 2, 8, 9, 10):
        stream[i] = {**stream[i], "kl": 0.9}
    assert sum("KL 0.9 > 0.5" in f for f in _run(stream)) == 2


def test_thresholds_are_configurable() -> None:
    from hello_agents.rl.config import Thresholds

    doctor = Doctor(5e-5, 0.05, 256, Thresholds(kl_high=0.02, patience=1))
    assert doctor.observe(1, {"kl": 0.03}) and "0.02" in doctor.findings[0]


def test_thresholds_from_the_config() -> None:
    from hello_agents.rl import ConfigError
    from hello_agents.rl.actions import parse

    assert parse({"doctor_thresholds": {"kl_high": 0.3}, "output_dir": "/tmp/x"}).doctor_thresholds == {"kl_high": 0.3}
    with pytest.raises(ConfigError, match="doctor_thresholds.kl_hgh.*kl_high"):
        parse({"doctor_thresholds": {"kl_hgh": 0.3}, "output_dir": "/tmp/x"})
