"""The multi-step tool task: chains of dependent lookups, held-out entities, an imperfect demonstrator, and the step
reward that credits grounded tool calls."""

from __future__ import annotations

import json
import random

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.rewards import build_reward
from hello_agents_rl.tasks import lookups
from hello_agents_rl.workflows.actions import parse


def test_each_call_takes_its_argument_from_the_question_or_an_earlier_result() -> None:
    for question in lookups.questions("train", lookups.LookupConfig(), 60, 0):
        seen = question.text
        assert 2 <= len(question.calls) <= 4
        for tool, argument, result in question.calls:
            if tool == "lookup":
                assert argument in seen and lookups.lookup(argument) == result
            else:
                assert all(number in seen for number in argument.split(" + "))
            seen += " " + result
        assert str(question.answer) in question.calls[-1][2]


def test_held_out_questions_are_about_entities_training_never_saw() -> None:
    train, test = lookups.knowledge_base("train"), lookups.knowledge_base("test")
    assert not set(train) & set(test)
    people = {q.calls[0][1] for q in lookups.questions("test", lookups.LookupConfig(), None, 0)}
    assert people <= set(test) and len(lookups.questions("test", lookups.LookupConfig(), None, 5)) == 250
    assert [q.text for q in lookups.questions("test", lookups.LookupConfig(), None, 1)] == [
        q.text for q in lookups.questions("test", lookups.LookupConfig(), None, 2)], "the test split never moves"
    with pytest.raises(ValueError, match="no entry named 'Nobody Here'"):
        lookups.lookup("Nobody Here")


def test_the_demonstrator_guesses_or_stops_early_as_documented() -> None:
    config = lookups.LookupConfig()
    rng = random.Random(0)
    outcomes: dict[int, list[str]] = {2: [], 3: [], 4: []}
    for question in lookups.questions("train", config, 3000, 0):
        transcript = lookups.demonstrate(question, config, rng)
        calls = sum(len(m.get("tool_calls") or []) for m in transcript)
        kind = "guess" if calls == 0 else "whole" if calls == len(question.calls) else "early"
        assert kind != "early" or calls == len(question.calls) - 1
        right = transcript[-1]["content"] == f"Final Answer: {question.answer}"
        assert right == (kind == "whole")
        outcomes[len(question.calls)].append(kind)
    for length, kinds in outcomes.items():
        guess = kinds.count("guess") / len(kinds)
        early = kinds.count("early") / (len(kinds) - kinds.count("guess"))
        assert guess == pytest.approx(config.guess_rate, abs=0.04)
        assert early == pytest.approx(config.early_stop_rate[length], abs=0.05)


def test_the_dataset_and_its_config_go_through_the_action_table() -> None:
    cfg = parse({"action": "train", "dataset": "lookups", "dataset_config": {"chain_lengths": [2, 4]},
                 "max_samples": 8, "tools": ["hello_agents_rl.tasks.lookups:lookup", "calculator"]})
    from hello_agents_rl.data.sources import load

    rows = load(cfg)
    assert len(rows) == 8 and set(rows["chain_length"]) == {2, 4}
    assert len(load(cfg, "test")) == 8, "the held-out split subsampled as any dataset's"
    assert len(load(parse({"action": "train", "dataset": "lookups"}), "test")) == 250
    with pytest.raises(ConfigError, match=r"`dataset_config.chain_lengths`: calls per question, each 2, 3 or 4"):
        parse({"action": "train", "dataset": "lookups", "dataset_config": {"chain_lengths": [5]}})
    with pytest.raises(ConfigError, match=r"`dataset_config.depth`: the lookups task has no such parameter"):
        parse({"action": "train", "dataset": "lookups", "dataset_config": {"depth": 3}})
    ids = load(parse({"action": "train", "dataset": "lookups", "dataset_config": {"names": "ids"}, "max_samples": 4}))
    assert all(q.split("where ")[1][0] == "P" for q in ids["question"]), "P4821-style names"
    for names in ("words", "ids"):
        assert not set(lookups.knowledge_base("train", names)) & set(lookups.knowledge_base("test", names))


@pytest.mark.parametrize(("config", "said"), [
    ({"chain_lengths": 3}, "`dataset_config.chain_lengths`: calls per question, each 2, 3 or 4, as a list"),
    ({"chain_lengths": ["2"]}, "`dataset_config.chain_lengths`"),
    ({"early_stop_rate": 0.5}, "`dataset_config.early_stop_rate`: chain length (2, 3 or 4) -> a number in [0, 1]"),
    ({"early_stop_rate": {"two": 0.5}}, "`dataset_config.early_stop_rate`"),
    ({"early_stop_rate": {"5": 0.5}}, "a chain length is 2, 3 or 4"),
    ({"distractors": "false"}, "`dataset_config.distractors`: true or false"),
    ({"guess_rate": "0.5"}, "`dataset_config.guess_rate`: a number in [0, 1]"),
    ("chain_lengths", "`dataset_config`: Input should be a valid dictionary"),
])
def test_a_wrong_type_in_dataset_config_is_refused_naming_its_key(config: object, said: str) -> None:
    """As the book's call, the CLI and the MCP server's load_dataset all reach it: a ConfigError, never a
    TypeError, an AttributeError, or a string read as true."""
    from hello_agents_rl.workflows import actions

    for action in ({"action": "load_dataset"}, {"action": "train", "tools": ["calculator"]}):
        with pytest.raises(ConfigError) as refused:
            actions.run({**action, "dataset": "lookups", "dataset_config": config})
        assert said in str(refused.value)
    assert lookups.Lookups({"early_stop_rate": {"2": 0.1}}).config.early_stop_rate == {2: 0.1, 3: 0.55, 4: 0.7}


def _trajectory(calls: list[tuple[str, str, str]], answer: str) -> list[dict]:
    messages = []
    for tool, argument, result in calls:
        key = "expression" if tool == "calculator" else "name"
        messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": tool, "arguments": json.dumps({key: argument})}}]},
            {"role": "tool", "name": tool, "content": result}]
    return messages + [{"role": "assistant", "content": f"Final Answer: {answer}"}]


def test_the_step_reward_credits_grounded_calls_and_cannot_be_gamed_by_repeating_one() -> None:
    question = next(q for q in lookups.questions("train", lookups.LookupConfig(), 30, 0) if len(q.calls) == 4)
    prompt = [{"role": "user", "content": question.text}]
    reward = build_reward("step", {"step_bonus": 0.1, "max_steps": 5}, max_tool_turns=6)

    def score(calls: list, answer: object = question.answer) -> float:
        return reward.score(_trajectory(calls, str(answer)), str(question.answer), prompt=prompt)

    whole = score(question.calls)
    assert whole == pytest.approx(1.0 + 0.4), "accuracy plus 0.1 for each of the 4 grounded calls"
    first = question.calls[0]
    assert score([first] * 4 + question.calls[1:2]) == pytest.approx(1.0 + 0.2), "a repeated call counts once"
    assert score([first, question.calls[-1]]) == pytest.approx(1.0 + 0.1), "numbers not read yet are made up"
    made_up = ("lookup", "Some Body", lookups.record_text(question.calls[2][1], lookups.knowledge_base("train")[
        question.calls[2][1]]))
    assert score([first, made_up]) == pytest.approx(1.0 + 0.1), "an argument from nowhere earns nothing"
    failed = [first, ("lookup", question.calls[1][1], "{'error': 'no entry named'}")]
    assert score(failed) == pytest.approx(1.0 + 0.1), "a call that failed earns nothing"
    assert score(question.calls, answer=question.answer + 1) == 0.0, "gated: a wrong answer gets no step credit"


@pytest.mark.parametrize("names", ["words", "ids"])
def test_a_right_chain_padded_with_calls_earns_no_more_than_the_honest_chain(names: str) -> None:
    """The padding a policy would find: the same call respelt (spaces, case), calls on a fragment of a name or on a
    number it has already read, and the distractor tool on one letter; none is a step."""
    config = lookups.LookupConfig(distractors=True, names=names)
    question = next(q for q in lookups.questions("train", config, 30, 0) if len(q.calls) == 4)
    prompt = [{"role": "user", "content": question.text}]
    reward = build_reward("step", {"step_bonus": 0.1, "max_steps": 10}, max_tool_turns=12)

    def score(calls: list) -> float:
        return reward.score(_trajectory(calls, str(question.answer)), str(question.answer), prompt=prompt)

    honest = score(question.calls)
    assert honest == pytest.approx(1.0 + 0.4)
    (_, person, person_text), (_, company, company_text) = question.calls[:2]
    age = question.calls[-1][1].split(" + ")[1]
    padding = [
        ("lookup", f"  {person} ", person_text), ("lookup", person.upper(), person_text),  # respelt: the same call
        ("lookup", person[:1], "W: sunny."),  # one letter of a name: a substring, not a value
        ("weather", person[:2], f"{person[:2]}: sunny."), ("weather", "a", "a: rain."),
        ("calculator", age, age), ("calculator", f"{age} + 0", age),  # a number it had read: nothing new
        ("lookup", company, company_text),  # a call made before, its result again
    ]
    for pad in padding:
        padded = [*question.calls[:2], pad, *question.calls[2:], pad]
        assert score(padded) <= honest + 1e-9, pad
    echoed = [("lookup", "777", "{'error': \"no entry named '777'\"}"), ("calculator", "777 * 777", "603729")]
    assert score([*question.calls, *echoed]) <= honest + 1e-9, "a made-up value an error echoed is not seen"


@pytest.mark.slow
def test_the_lookups_demo_runs_end_to_end_and_reports_the_chain_metrics(tmp_path) -> None:
    """The demo's code path at a few steps (learning is benchmarks/demo_lookups_seeds.py's, on the full recipe)."""
    from dataclasses import replace

    from hello_agents_rl.workflows import demo_tool_use

    recipe = replace(demo_tool_use.LOOKUPS, sft_steps=10, sft_batch_size=4, grpo_steps=2, grpo_batch_size=2,
                     num_generations=2, eval_questions=6, logging_steps=1)
    results = demo_tool_use.run_demo(tmp_path / "demo", seed=0, recipe=recipe)
    assert results["task"] == "lookups"
    for key in ("sft", "grpo"):
        row = results[key]
        assert row["num_questions"] == 6 and 0.0 <= row["chain_completion_rate"] <= 1.0 and 0.0 <= row["accuracy"] <= 1.0
    assert results["cpu_seconds"]["grpo"] > 0  # the SmolLM2 recipe's budget is the GRPO phase's CPU time
    assert 0 < results["train_cpu_s"]["grpo"] <= results["cpu_seconds"]["grpo"]  # and its run keeps its own, for reuse
    assert (tmp_path / "demo" / "report.md").is_file()
    sft = json.loads((tmp_path / "demo" / "sft" / "results.json").read_text())
    assert sft["config"]["tools"] == ["hello_agents_rl.tasks.lookups:lookup", "calculator"]


def test_the_smollm2_lookups_benchmark_fails_a_seed_whose_grpo_phase_is_over_budget_or_was_not_measured() -> None:
    from demo_lookups_seeds import report  # benchmarks/ is on the path (conftest.py)

    def run(grpo_cpu_s: float, reused: list[str]) -> dict:
        side = {"accuracy": 0.3, "chain_completion_rate": 0.4, "mean_calls": 2.0, "failed_call_rate": 0.0}
        return {"sft": side, "grpo": side | {"accuracy": 0.5}, "seconds": {"grpo": 900.0},
                "cpu_seconds": {"grpo": grpo_cpu_s}, "cpu_time_s": 4000.0, "reused_training": reused}

    agent_demo_reused = run(5.0, ["sft", "grpo"]) | {"train_cpu_s": {"grpo": 35 * 60}}  # agents re-run on its models
    plain_demo_reused = run(5.0, ["grpo"]) | {"train_cpu_s": {"grpo": 39 * 60}, "train_runtime_s": {"grpo": 1200.0}}
    resumed = run(5.0, ["grpo"]) | {"train_cpu_s": {"grpo": None}}  # its run resumed: it counted part of itself
    table, verdicts = report({0: run(30 * 60, []), 1: run(40 * 60 + 3, []), 2: run(5.0, ["sft", "grpo"]),
                              3: agent_demo_reused, 4: plain_demo_reused, 5: resumed}, "smollm2")
    budget = [v for v in verdicts if "CPU-minutes" in v]
    assert budget == ["PASS seed 0: GRPO phase 30.0 CPU-minutes <= 40", "FAIL seed 1: GRPO phase 40.0 CPU-minutes <= 40",
                      "FAIL seed 2: GRPO phase unmeasured CPU-minutes <= 40",
                      "PASS seed 3: GRPO phase 35.0 CPU-minutes <= 40", "PASS seed 4: GRPO phase 39.0 CPU-minutes <= 40",
                      "FAIL seed 5: GRPO phase unmeasured CPU-minutes <= 40"]
    assert "| 1200 | 39.0 |" in table  # a reused plain run: its own wall and CPU time, not the demo's 5-second lap
    assert "GRPO CPU min" in table and "| 30.0 |" in table
    assert "GRPO CPU min" not in report({0: run(30 * 60, [])}, "tiny")[0]  # the tiny model has no such budget
