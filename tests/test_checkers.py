"""answer_checker: math-verify (the checker of TRL's accuracy_reward and open-r1) for LaTeX and expression answers,
the same verdict in the reward and in evaluation; numbers stay ours by default; a missing extra says how to install."""

from __future__ import annotations

import typing

import pytest
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.config.data import AnswerChecker
from hello_agents_rl.rewards import checkers
from hello_agents_rl.rollouts.loop import Rollout

# (completion, ground truth, number's verdict, math_verify's verdict)
VERDICTS = [
    (r"so \boxed{(x+1)^2}", "x^2+2x+1", False, True),
    (r"The answer is \boxed{(1,3]}", "(1, 3]", False, True),
    (r"\boxed{\sqrt{2}}", r"\sqrt{2}", False, True),
    (r"\boxed{\{1, 2\}}", r"\{2, 1\}", False, True),
    ("Final Answer: 3", r"\frac{6}{2}", True, True),
    ("48 + 24 = 72\nFinal Answer: 72", "Natalia sold 48 + 24 = 72 clips.\n#### 72", True, True),
    ("Final Answer: 71", "72", False, False),
    (r"\boxed{\frac{1}{3}}", r"\frac{1}{2}", False, False),
    ("no answer here", r"\frac{1}{2}", False, False),
]


def test_the_config_offers_exactly_the_checkers_there_are() -> None:
    assert set(typing.get_args(AnswerChecker)) == set(checkers.CHECKERS)


@pytest.mark.parametrize(("completion", "truth", "number", "math_verify"), VERDICTS)
def test_each_checker_judges_as_documented(completion: str, truth: str, number: bool, math_verify: bool) -> None:
    assert checkers.CHECKERS["number"](completion, truth) is number
    assert checkers.CHECKERS["math_verify"](completion, truth) is math_verify


def test_create_reward_shows_math_verify_at_work() -> None:
    completions = [c for c, *_ in VERDICTS]
    truths = [t for _, t, *_ in VERDICTS]
    tool = RLTrainingTool()
    ours = tool.run({"action": "create_reward", "completions": completions, "ground_truth": truths})
    verified = tool.run({"action": "create_reward", "completions": completions, "ground_truth": truths,
                         "answer_checker": "math_verify", "reward_type": "step"})
    assert ours["scores"] == [float(n) for *_, n, _ in VERDICTS], "the default stays the number checker"
    assert verified["components"]["accuracy"] == [float(m) for *_, m in VERDICTS]
    steps, right = verified["components"]["step"], verified["components"]["accuracy"]
    assert steps[5] > 0 and all(s == 0 for s, a in zip(steps, right) if not a), "step's bonus: gated by the same checker"


def test_evaluation_judges_with_the_rewards_checker() -> None:
    from hello_agents_rl.evaluation.metrics import question_details

    completion, truth = VERDICTS[0][:2]
    answer = Rollout(ids=[], prompt_len=0, tools={}, schemas=[], messages=[{"role": "assistant", "content": completion}])
    row = {"question": "Expand.", "ground_truth": truth}
    for checker in checkers.CHECKERS:
        details = question_details(row, answer, [answer], False, checker)
        reward = RLTrainingTool().run({"action": "create_reward", "completions": [completion], "ground_truth": truth,
                                       "answer_checker": checker})["scores"][0]
        assert details["correct"] is (reward == 1.0) and details["samples_correct"] == int(reward)


def test_a_missing_extra_is_a_config_error_with_the_install_line(monkeypatch) -> None:
    monkeypatch.setattr(checkers, "find_spec", lambda name: None)
    for params in ({"action": "create_reward", "completions": ["1"], "ground_truth": "1"},
                   {"action": "train", "output_dir": "/tmp/hello-agents-rl-never-written"},
                   {"action": "evaluate", "model_path": "Qwen/Qwen3-0.6B"}):
        with pytest.raises(ConfigError, match="`answer_checker`") as caught:
            RLTrainingTool().run({**params, "answer_checker": "math_verify"})
        assert "pip install 'hello-agents-rl[math]'" in str(caught.value)
