"""Tests for hello_agents_rl.rewards: extraction, reward terms, config validation, TRL adapter."""

from __future__ import annotations

import functools
import importlib.util
import math
import textwrap
import time
from fractions import Fraction
from pathlib import Path
from types import CodeType, SimpleNamespace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards import (
    REWARD_NAMES,
    TERMS,
    TOOL_REWARD_KEYS,
    Reward,
    RewardComponent,
    build_reward,
    count_steps,
    extract_answer,
    follows_format,
    group_advantages,
    is_correct,
    length_penalty_score,
    parse_ground_truth,
    parse_number,
    step_score,
    to_trl_reward,
)
from hello_agents_rl.rewards.correctness import readings, text_answer

JUNK = b"\xff\xfe Final Answer: 72 \xc3\x28".decode("utf-8", errors="replace")

# --- extraction ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("72", 72),
        ("72.0", 72),
        ("72.", 72),
        ("1,000", 1000),
        ("1,234.50", Fraction("1234.5")),
        ("$18", 18),
        ("-3", -3),
        ("+5", 5),
        (".5", Fraction(1, 2)),
        ("0.75", Fraction(3, 4)),
        ("3/4", Fraction(3, 4)),
        ("50%", 50),
        ("  42  ", 42),
        ("", None),
        ("abc", None),
        ("72 apples", None),
        ("1/0", None),
        ("\x00\ufffd", None),
    ],
)
def test_parse_number(text: str, expected: object) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("Final Answer: 72", 72),
        ("final answer:72", 72),
        ("**Final Answer:** 72", 72),
        ("**Final Answer**: 72", 72),
        ("#### 72", 72),
        ("\\boxed{72}", 72),
        ("So the total is \\boxed{\\frac{3}{4}}.", Fraction(3, 4)),
        ("The answer is 72.", 72),
        ("answer: 72", 72),
        ("Final Answer: 72.0", 72),
        ("Final Answer: 1,000", 1000),
        ("Final Answer: $18", 18),
        ("Final Answer: -3", -3),
        ("Final Answer: 3/4", Fraction(3, 4)),
        ("Final Answer: 0.75", Fraction(3, 4)),
        ("Final Answer: 50%", 50),
        ("Final Answer: 72.\nHope this helps! See you in 5 minutes.", 72),
        ("The answer is\n\n72\n", 72),
        ("Final Answer: 48 + 24 = 72", 72),
        ("Final Answer: 72. Check: 72 - 24 = 48", 72),
        # several numbers: the LAST marker wins, not the last number
        ("The answer is 70. Wait, 48 + 24 = 72. Final Answer: 72 (not 70)", 72),
        ("Final Answer: 70\nActually I erred.\nFinal Answer: 72", 72),
        ("#### 10\nThe answer is 12, double-checked by 6 * 2", 12),
        # a marker without a number falls back to the previous marker
        ("Final Answer: 72. That is my answer:", 72),
        ("Final Answer: 72\nanswer: none given", 72),
        # a markdown heading is not the GSM8K "####" marker
        ("#### Step 1\n48 + 24 = 72\n#### Step 2\nso we get 72 in total", 72),
        # no marker: the last number (GSM8K convention); "-" between numbers is not a sign
        ("48 + 24 = 72", 72),
        ("I had 10 - 3", 3),
        ("48 + 24 is 72.", 72),
        # junk and invalid UTF-8
        (JUNK, 72),
        ("Final Answer: 72\x00\x07\ufffd", 72),
        ("\x00\ufffd", None),
        ("", None),
        ("no numbers here", None),
        ("Final Answer: unknown", None),
    ],
)
def test_extract_answer(completion: str, expected: object) -> None:
    assert extract_answer(completion) == expected


@pytest.mark.parametrize(
    ("truth", "expected"),
    [
        (72, 72),
        ("72", 72),
        (72.0, 72),
        (0.1, Fraction(1, 10)),
        (Fraction(3, 4), Fraction(3, 4)),
        ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", 72),
        ("step #### 5 then #### 1,000", 1000),
        (True, None),
        (None, None),
        (float("nan"), None),
        ("n/a", None),
    ],
)
def test_parse_ground_truth(truth: object, expected: object) -> None:
    assert parse_ground_truth(truth) == expected


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        ("Final Answer: 72.0", 72, True),
        ("Final Answer: 3/4", 0.75, True),
        ("Final Answer: 0.75", "3/4", True),
        ("Final Answer: 72", "#### 72", True),
        ("Final Answer: 1,000", 1000, True),
        ("Final Answer: 71", 72, False),
        ("", 72, False),
        ("Final Answer: 1", True, False),
    ],
)
def test_is_correct(completion: str, truth: object, expected: bool) -> None:
    assert is_correct(completion, truth) is expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("48 + 24 = 72. Final Answer: 72", 1),
        ("48 + 24 = 72.\n48 + 24 = 72.\n48+24=72", 1),  # padding earns nothing
        ("3 * 4 = 12\n12 + 1 = 13\n13 - 3 = 10", 3),
        ("48/2 = 24, then 24 x 3 = 72", 2),
        ("48 + 24 = 72 + 8 = 80", 2),  # chained
        ("48 + 24 = <<48+24=72>>72", 1),  # GSM8K calculator annotation
        ("x = 5\n72 = 72\n1,000 = 1000", 0),  # no arithmetic on the left
        ("\n\n\n\n\n\nFinal Answer: 72", 0),
        ("", 0),
    ],
)
def test_count_steps(completion: str, expected: int) -> None:
    assert count_steps(completion) == expected


# --- reward terms ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "target", "expected"),
    [(0, 200, 0.0), (200, 200, 0.0), (250, 200, -0.25), (400, 200, -1.0), (10_000, 200, -1.0), (36, 30, -0.2)],
)
def test_length_penalty_score(length: int, target: int, expected: float) -> None:
    assert length_penalty_score("x" * length, target_length=target) == pytest.approx(expected)


def test_length_penalty_ignores_surrounding_whitespace() -> None:
    assert length_penalty_score("  \n" + "x" * 10 + "\n\n", target_length=10) == 0.0


def test_step_score_is_gated_on_correctness() -> None:
    steps = "3 * 4 = 12\n12 + 1 = 13\n13 - 3 = 10\n10 * 2 = 20\n20 / 4 = 5\n5 + 5 = 10\n7 + 7 = 14\n"
    assert step_score(steps + "Final Answer: 10", 10) == pytest.approx(0.5)  # capped at max_steps=5
    assert step_score(steps + "Final Answer: 10", 10, step_bonus=0.2, max_steps=2) == pytest.approx(0.4)
    assert step_score(steps + "Final Answer: 11", 10) == 0.0


def test_old_bug_wrong_answer_with_newlines_and_steps_gets_zero() -> None:
    # The old tool paid 0.5 to this: six newlines, some steps, wrong answer.
    wrong = "48 + 24 = 70\n\n\n\n\n\n70 + 0 = 70\nFinal Answer: 70"
    reward = build_reward("step")
    assert reward.score(wrong, 72) == 0.0
    assert reward.score_components(wrong, 72) == {"accuracy": 0.0, "step": 0.0}


def test_every_term_in_the_table_is_a_reward_a_user_can_name() -> None:
    """The table is the one registry: an answer term is a `reward_type` (accuracy plus the term, weighted by the
    table's default) and a `combined` component with the table's parameter defaults; a tool term is a
    `tool_reward` key; the JSON schema and the config's help offer every name; a typo gets the closest one."""
    from hello_agents_rl.config import CreateRewardConfig, TrainConfig
    from hello_agents_rl.schema import json_schema

    for action in ("train", "create_reward"):
        assert json_schema(action)["properties"]["reward_type"]["enum"] == list(REWARD_NAMES)
    for config in (TrainConfig, CreateRewardConfig):
        assert all(name in config.model_fields["reward_type"].description for name in REWARD_NAMES)
    assert all(name in TrainConfig.model_fields["tool_reward"].description for name in TOOL_REWARD_KEYS)
    for name, term in TERMS.items():
        if term.tool_shaping:
            assert name in TOOL_REWARD_KEYS and name not in REWARD_NAMES
            last = build_reward("accuracy", None, {name: 0.1}, max_tool_turns=2).components[-1]
            assert (last.name, last.fn, last.weight) == (name, term.fn, 0.1)
            with pytest.raises(ConfigError, match=f"tool_reward.*did you mean `{name}`"):
                build_reward("accuracy", None, {name[:-1]: 0.1}, max_tool_turns=2)
            continue
        defaults = {key: param.default for key, param in term.params.items()}
        first = build_reward("combined", {"components": [{"type": name, "weight": 0.5}, ACC]}).components[0]
        assert (first.name, first.fn, first.params) == (name, term.fn, defaults)
        shorthand = build_reward(name).components[-1]
        assert (shorthand.fn, shorthand.weight) == (term.fn, term.default_weight if name != "accuracy" else 1.0)
        with pytest.raises(ConfigError, match=f"reward_type.*did you mean `{name}`"):
            build_reward(name[:-1])


# --- the seed's worked example -----------------------------------------------------

QUESTION = "What is 48 + 24?"
ANSWERS = [
    "48 + 24 = 72. Final Answer: 72",
    "48 + 24 = 72. Final Answer: 72",
    "48 + 24 = 70. Final Answer: 70",
    "Let me think... 72. Final Answer: 72",
]


@pytest.mark.parametrize(
    "reward",
    [
        build_reward("length_penalty", {"target_length": 30, "penalty_weight": 1.0}),
        build_reward(
            "combined",
            {"components": [{"type": "accuracy", "weight": 1.0},
                            {"type": "length_penalty", "weight": 1.0, "target_length": 30}]},
        ),
    ],
    ids=["length_penalty", "combined"],
)
def test_seed_worked_example(reward: Reward) -> None:
    assert [len(a) for a in ANSWERS] == [30, 30, 30, 36]
    rewards = [reward.score(a, 72, prompt=QUESTION) for a in ANSWERS]
    assert rewards == pytest.approx([1.0, 1.0, 0.0, 0.8])
    assert sum(rewards) / len(rewards) == pytest.approx(0.7)
    assert group_advantages(rewards, num_generations=4) == pytest.approx([0.3, 0.3, -0.7, 0.1])
    assert to_trl_reward(reward)(prompts=[QUESTION] * 4, completions=ANSWERS, ground_truth=[72] * 4) == (
        pytest.approx([1.0, 1.0, 0.0, 0.8])
    )


def test_group_advantages_scale_and_groups() -> None:
    assert group_advantages([1.0, 0.0, 5.0, 5.0], 2) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    scaled = group_advantages([1.0, 0.0], 2, scale=True)
    assert scaled == pytest.approx([0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)])
    assert group_advantages([3.0], 1, scale=True) == [0.0]
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([1.0, 2.0], 3)


@functools.cache
def _trl_advantage_code() -> CodeType:
    """The code of the installed TRL that computes GRPO's advantages, compiled as it is (read from its source files,
    so that TRL need not be imported): TRL computes them inline in GRPOTrainer._generate_and_score_completions, from
    the unscorable mask to nan_to_num, with its `nanstd` (trl/trainer/utils.py)."""
    trainer = Path(importlib.util.find_spec("trl").origin).parent / "trainer"
    lines = (trainer / "grpo_trainer.py").read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if "unscorable_mask = torch.isnan(rewards_per_func)" in line)
    last = next(i for i, line in enumerate(lines) if "advantages = torch.nan_to_num(advantages" in line)
    utils = (trainer / "utils.py").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(utils) if line.startswith("def nanstd("))
    end = next(i for i in range(start + 1, len(utils)) if utils[i][:1] not in ("", " ", ")"))
    source = "\n".join(utils[start:end]) + "\n" + textwrap.dedent("\n".join(lines[first:last + 1]))
    return compile(source, str(trainer / "grpo_trainer.py"), "exec")


def _trl_advantages(rewards: list[float | None], num_generations: int, scale_rewards: str) -> list[float]:
    """TRL's own advantages for one reward function's scores (None: the function returned None), on a stand-in for
    the trainer holding the attributes TRL's code reads."""
    import torch

    stand_in = SimpleNamespace(multi_objective_aggregation="sum_then_normalize", scale_rewards=scale_rewards,
                               reward_weights=torch.ones(1, dtype=torch.float64), reward_funcs=[None])
    scope = {"torch": torch, "self": stand_in, "num_generations": num_generations, "device": "cpu",
             "rewards_per_func": torch.tensor([[math.nan if r is None else r] for r in rewards], dtype=torch.float64)}
    exec(_trl_advantage_code(), scope)  # TRL's installed code, unchanged
    return scope["advantages"].tolist()


@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), st.lists(
    st.lists(st.one_of(st.none(), st.floats(-10, 10)), min_size=n, max_size=n), min_size=1, max_size=3))))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_group_advantages_are_trls(case: tuple[int, list[list[float | None]]]) -> None:
    num_generations, groups = case
    rewards = [r for group in groups for r in group]
    for scale, scale_rewards in ((False, "none"), (True, "group")):
        assert group_advantages(rewards, num_generations, scale=scale) == pytest.approx(
            _trl_advantages(rewards, num_generations, scale_rewards), rel=1e-6, abs=1e-6), scale_rewards


def test_group_advantages_are_trls_on_the_books_example_and_ties() -> None:
    rewards = [1.0, 1.0, 0.0, 0.8, 0.5, 0.5, 0.5, 0.5, 1.0, None, 0.0, None]  # the book's group, a tied one, failures
    for scale, scale_rewards in ((False, "none"), (True, "group")):
        expected = _trl_advantages(rewards, 4, scale_rewards)
        assert group_advantages(rewards, 4, scale=scale) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert expected[4:8] == [0.0] * 4 and expected[9] == expected[11] == 0.0


# --- build_reward --------------------------------------------------------------------


def test_build_reward_shapes() -> None:
    assert [(c.name, c.weight) for c in build_reward().components] == [("accuracy", 1.0)]
    lp = build_reward("length_penalty")
    assert [(c.name, c.weight, c.params) for c in lp.components] == [
        ("accuracy", 1.0, {}), ("length_penalty", 0.5, {"target_length": 200})]
    step = build_reward("step", {"step_bonus": 0.2})
    assert step.components[1].params == {"step_bonus": 0.2, "max_steps": 5}
    seed = build_reward("combined", {"components": [
        {"type": "accuracy", "weight": 1.0},
        {"type": "length_penalty", "weight": 0.5, "target_length": 200},
        {"type": "step", "weight": 0.3, "step_bonus": 0.1},
        {"type": "accuracy", "weight": 0.5},
    ]})
    assert [c.name for c in seed.components] == ["accuracy", "length_penalty", "step", "accuracy_2"]
    assert seed.name == "combined"


def test_score_components_are_raw_and_score_is_weighted() -> None:
    reward = build_reward("combined", {"components": [
        {"type": "accuracy", "weight": 2.0}, {"type": "step", "weight": 0.5}]})
    text = "3 * 4 = 12\n12 + 1 = 13\nFinal Answer: 13"
    assert reward.score_components(text, 13) == pytest.approx({"accuracy": 1.0, "step": 0.2})
    assert reward.score(text, 13) == pytest.approx(2.1) == reward(text, 13)


def test_callable_reward_type() -> None:
    def brevity(completion: str, ground_truth: object) -> float:  # no **kwargs: context is filtered
        return 1.0 / (1 + len(completion))

    reward = build_reward(brevity)
    assert reward.name == "brevity"
    assert reward.components == (RewardComponent("brevity", brevity, 1.0, {}),)
    assert reward.score("abc", None, prompt="ignored") == 0.25


def test_callable_component_gets_context_and_params() -> None:
    seen = {}

    def custom(completion: str, ground_truth: object, **kw: object) -> float:
        seen.update(kw)
        return 1.0

    reward = build_reward("combined", {"components": [
        {"type": "accuracy", "weight": 1.0}, {"type": custom, "weight": -0.5, "scale": 3}]})
    assert reward.score("Final Answer: 1", 1, prompt="p") == 0.5
    assert seen == {"prompt": "p", "scale": 3}


def lp(weight: object, **params: object) -> dict:
    return {"type": "length_penalty", "weight": weight, **params}


ACC = {"type": "accuracy", "weight": 1.0}


@pytest.mark.parametrize(
    ("reward_type", "config", "key"),
    [
        ("acuracy", None, r"reward_type.*did you mean `accuracy`"),
        (42, None, "reward_type"),
        ("accuracy", ["not", "a", "dict"], "reward_config"),
        ("combined", None, r"reward_config\.components"),
        ("combined", {"components": []}, r"reward_config\.components"),
        ("combined", {"components": {"type": "accuracy"}}, r"reward_config\.components"),
        ("combined", {"components": [ACC], "weight": 1}, r"reward_config\.weight"),
        ("combined", {"components": [ACC, "accuracy"]}, r"reward_config\.components\[1\]"),
        ("combined", {"components": [ACC, {"weight": 1.0}]}, r"reward_config\.components\[1\]\.type"),
        ("combined", {"components": [{"type": "acc", "weight": 1}]}, r"components\[0\]\.type"),
        ("combined", {"components": [{"type": ["x"], "weight": 1}]}, r"components\[0\]\.type"),
        ("combined", {"components": [{"type": "accuracy"}]}, r"reward_config\.components\[0\]\.weight"),
        ("combined", {"components": [ACC, lp("heavy")]}, r"reward_config\.components\[1\]\.weight"),
        ("combined", {"components": [ACC, lp(float("nan"))]}, r"reward_config\.components\[1\]\.weight"),
        ("combined", {"components": [ACC, lp(True)]}, r"reward_config\.components\[1\]\.weight"),
        ("combined", {"components": [ACC, lp(0.5, target_lenght=30)]},
         r"components\[1\]\.target_lenght.*did you mean `target_length`"),
        ("combined", {"components": [{**ACC, "target_length": 3}]}, r"components\[0\]\.target_length"),
        ("combined", {"components": [ACC, lp(0.5, target_length=0)]}, r"components\[1\]\.target_length"),
        ("combined", {"components": [ACC, lp(0.5, target_length=2.5)]}, r"components\[1\]\.target_length"),
        ("combined", {"components": [ACC, {"type": "step", "weight": 1, "step_bonus": -0.1}]},
         r"components\[1\]\.step_bonus"),
        ("combined", {"components": [ACC, {"type": "step", "weight": 1, "max_steps": 0}]},
         r"components\[1\]\.max_steps"),
        ("combined", {"components": [{"type": "accuracy", "weight": -1.0}]}, r"components\[0\]\.weight"),
        ("combined", {"components": [ACC, {"type": "step", "weight": -0.3}]}, r"components\[1\]\.weight"),
        ("combined", {"components": [ACC, lp(-0.5)]}, r"components\[1\]\.weight"),
        ("combined", {"components": [ACC, lp(0.6), lp(0.6)]},
         r"reward_config.*a wrong answer could outscore a right one"),
        ("combined", {"components": [lp(0.1)]}, r"reward_config.*Fix: lower length_penalty"),
        ("length_penalty", {"penalty_weight": 1.5}, r"reward_config.*exceeds the accuracy weight"),
        ("length_penalty", {"penalty_weight": "0.5"}, r"reward_config\.penalty_weight"),
        ("length_penalty", {"target_lenght": 30}, r"reward_config\.target_lenght.*did you mean `target_length`"),
        ("length_penalty", {"target_length": 0}, r"reward_config\.target_length"),
        ("step", {"step_bonus": -1}, r"reward_config\.step_bonus"),
        ("step", {"max_steps": 0}, r"reward_config\.max_steps"),
        ("step", {"max_step": 3}, r"reward_config\.max_step.*did you mean `max_steps`"),
        ("accuracy", {"target_length": 30}, r"reward_config\.target_length"),
    ],
)
def test_build_reward_validation(reward_type: object, config: object, key: str) -> None:
    with pytest.raises(ConfigError, match=key) as info:
        build_reward(reward_type, config)  # type: ignore[arg-type]
    assert "Fix:" in str(info.value)


def test_length_penalty_equal_to_accuracy_is_allowed() -> None:
    # Ties are allowed at the extreme: a correct answer never scores BELOW a wrong one.
    reward = build_reward("combined", {"components": [ACC, lp(0.5), lp(0.5)]})
    assert reward.score("x" * 500 + " Final Answer: 1", 1) == 0.0 == reward.score("Final Answer: 2", 1)


# --- the guarantee (property) ---------------------------------------------------------

prose = st.text(alphabet=st.sampled_from(list("abc 123+=*\n.")), max_size=400)
component = st.one_of(
    st.builds(lambda w, t: lp(w, target_length=t), st.floats(0, 3), st.integers(1, 500)),
    st.builds(lambda w, b, m: {"type": "step", "weight": w, "step_bonus": b, "max_steps": m},
              st.floats(0, 3), st.floats(0, 2), st.integers(1, 10)),
    st.builds(lambda w: {"type": "accuracy", "weight": w}, st.floats(0, 3)),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    components=st.lists(component, min_size=1, max_size=5),
    truth=st.integers(-1000, 1000),
    offset=st.integers(1, 50),
    correct_prose=prose,
    wrong_prose=prose,
)
def test_correct_never_scores_below_wrong(
    components: list[dict], truth: int, offset: int, correct_prose: str, wrong_prose: str
) -> None:
    try:
        reward = build_reward("combined", {"components": components})
    except ConfigError:
        assume(False)
    correct = f"{correct_prose}\nFinal Answer: {truth}"
    wrong = f"{wrong_prose}\nFinal Answer: {truth + offset}"
    assert is_correct(correct, truth) and not is_correct(wrong, truth)
    assert reward.score(correct, truth) >= reward.score(wrong, truth) - 1e-9


CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3 + 4"}}}]}


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(bonus=st.floats(0, 1), penalty=st.floats(0, 1), length=st.floats(0, 1), turns=st.integers(1, 4),
       failed_calls=st.integers(0, 6), wrong_calls=st.integers(0, 3))
def test_tool_shaping_inside_the_bound_never_lets_a_wrong_answer_outscore_a_right_one(
    bonus: float, penalty: float, length: float, turns: int, failed_calls: int, wrong_calls: int
) -> None:
    try:
        reward = build_reward("length_penalty", {"penalty_weight": length, "target_length": 10},
                              {"call_bonus": bonus, "failed_call_penalty": penalty}, max_tool_turns=turns)
    except ConfigError:
        assume(False)
    failed = [CALL, {"role": "tool", "name": "calculator", "content": "{'error': 'bad'}"}] * failed_calls
    right = [*failed, {"role": "assistant", "content": "x" * 50 + " Final Answer: 7"}]  # long, after failed calls
    worked = [CALL, {"role": "tool", "name": "calculator", "content": "7"}] * wrong_calls
    wrong = [*worked, {"role": "assistant", "content": "Final Answer: 8"}]  # short, after calls that worked
    assert reward.score(right, 7) >= reward.score(wrong, 7) - 1e-9


@given(st.text())
def test_parsers_never_raise(text: str) -> None:
    extract_answer(text)
    parse_number(text)
    parse_ground_truth(text)
    count_steps(text)
    follows_format(text)
    follows_format(text, text_answer=True)
    readings(text_answer(text))


@pytest.mark.parametrize("text", ["9" * 5000, "Final Answer: " + "1" * 10_000, "0." + "5" * 5000 + "/7"])
def test_huge_numbers_do_not_raise(text: str) -> None:
    # Past int()'s digit limit (4300) a number is unreadable: no answer, never a wrong one such as a prefix.
    assert extract_answer(text) is None
    assert parse_number(text) is None
    # ...and it does not hide the number the answer states, nor is a big number under the limit lost.
    assert extract_answer(f"Final Answer: 72\n{text}") == 72
    assert extract_answer(f"{text}\nFinal Answer: 12") == extract_answer(f"{text} 12") == 12
    assert parse_number("9" * 4000) == 10**4000 - 1
    assert extract_answer("Final Answer: " + "9" * 4000) == 10**4000 - 1


def _cpu_seconds(text: str, repeats: int = 5) -> float:
    """The fastest of a few runs of the parsers, in this process's CPU time: other processes on a busy machine
    do not count, and the minimum drops the runs a cache miss or a collection slowed down."""
    best = math.inf
    for _ in range(repeats):
        start = time.process_time()
        extract_answer(text)
        count_steps(text)
        readings(text_answer(text))  # a reasoning-gym row's reading
        best = min(best, time.process_time() - start)
        if best > 1.0:
            break  # already far too slow: no need to wait for more runs
    return best


@pytest.mark.parametrize("unit", ["Final Answer: ", "\\boxed{", "1 + ", "answer:\n", "(1 "])
def test_degenerate_output_is_linear_time(unit: str) -> None:
    # RL policies collapse into repetition; scoring must not stall the trainer. Eight times the text must cost
    # about eight times the time: a quadratic parser costs about 64 times, and the bound leaves room for noise.
    small, large = 400, 3200
    _cpu_seconds(unit * small)  # warm the regex caches
    small_seconds, large_seconds = _cpu_seconds(unit * small), _cpu_seconds(unit * large)
    ratio = large_seconds / max(small_seconds, 1e-5)
    assert ratio < 20, f"{large // small}x the text took {ratio:.1f}x the time"
    assert large_seconds < 1.0


# --- TRL adapter ---------------------------------------------------------------------


def test_trl_adapter_strings_and_conversations() -> None:
    adapter = to_trl_reward(build_reward("accuracy"))
    assert adapter.__name__ == "accuracy"
    completions = [
        "Final Answer: 72",
        [{"role": "assistant", "content": "Final Answer: 72"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "Final Answer: 5"}]}],
        [{"role": "assistant", "content": "Final Answer: 3"}],
    ]
    scores = adapter(prompts=["q"] * 4, completions=completions, completion_ids=[[1]] * 4,
                     ground_truth=[72, "#### 72", 5, 4], trainer_state=object(),
                     log_extra=lambda *a: None, log_metric=lambda *a: None)
    assert scores == [1.0, 1.0, 1.0, 0.0]
    assert adapter.failures == 0 and adapter.first_failure is None


def test_trl_adapter_passes_row_columns_to_custom_callable() -> None:
    def difficulty_bonus(completion: str, ground_truth: object, level: int) -> float:
        return float(level)

    def echo_prompt(completion: str, ground_truth: object, prompt: str) -> float:
        return float(len(prompt))

    adapter = to_trl_reward(build_reward(difficulty_bonus))
    assert adapter(prompts=["a", "b"], completions=["x", "y"], level=[1, 2], trainer_state=None) == [1.0, 2.0]
    assert to_trl_reward(build_reward(echo_prompt))(prompts=["a", "bcd"], completions=["x", "y"]) == [1.0, 3.0]


@pytest.mark.parametrize("bad", [ValueError("boom"), None, float("nan"), float("inf"), "text"])
def test_trl_adapter_survives_failing_rewards(bad: object) -> None:
    def flaky(completion: str, ground_truth: object, **_: object) -> object:
        if completion == "bad":
            if isinstance(bad, Exception):
                raise bad
            return bad
        return 1.0

    adapter = to_trl_reward(build_reward(flaky), failure_reward=0.0)
    assert adapter.__name__ == "flaky"
    assert adapter(completions=["ok", "bad", "bad"], ground_truth=[1, 1, 1]) == [1.0, 0.0, 0.0]
    assert adapter.failures == 2
    assert "Traceback" in adapter.first_failure


def test_trl_adapter_requires_ground_truth_column() -> None:
    with pytest.raises(ConfigError, match="ground_truth"):
        to_trl_reward(build_reward("accuracy"))(prompts=["q"], completions=["Final Answer: 1"])
