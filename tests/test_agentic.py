"""Agentic RL, the parts a user meets first: tools, their guards, validation, trajectory rewards."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.rewards import build_reward, to_trl_reward
from hello_agents_rl.rollouts.tool_guard import ToolStats, guard, guarded_environment
from hello_agents_rl.rollouts.tool_registry import ToolFailure, calculator, python, resolve_tools
from hello_agents_rl.trajectory import read_trajectory

# --- built-in tools --------------------------------------------------------------------------------------------


def test_calculator_is_exact_and_parses_instead_of_eval() -> None:
    assert calculator("347 * 56") == "19432"
    assert calculator("(12 + 3) / 4") == "3.75"
    assert calculator("1/3") == "1/3"
    assert calculator("2 ** 10 - 0.1") == "1023.9"
    for bad in ["__import__('os').system('true')", "open('x')", "2 ** 100000", "1/0", "x + 1", ""]:
        with pytest.raises(ValueError):
            calculator(bad)


def test_python_tool_runs_isolated_with_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELLO_SECRET", "leak")
    monkeypatch.chdir(tmp_path)
    assert python("print(6 * 7)") == "42"
    assert python("import os; print(os.environ.get('HELLO_SECRET'), os.listdir('.'))") == "None []"  # no env, empty folder
    with pytest.raises(ToolFailure, match="ZeroDivisionError"):
        python("1/0")
    with pytest.raises(ToolFailure, match="MemoryError"):
        python("x = bytearray(2 * 1024**3)")
    monkeypatch.setattr("hello_agents_rl.rollouts.tool_registry.PYTHON_TIME_LIMIT_S", 1.0)
    started = time.time()
    with pytest.raises(ToolFailure, match="timed out"):
        python("while True: pass")
    assert time.time() - started < 5


def test_a_busy_snippet_dies_on_its_own_cpu_limit_even_when_nobody_kills_it() -> None:
    """The kernel's CPU limit, not only our timer: a busy loop whose killer is gone (the trainer exited, the
    guard abandoned the call) once kept a core busy for an hour."""
    assert python("import resource; print(resource.getrlimit(resource.RLIMIT_CPU))") == "(6, 6)"
    from hello_agents_rl.rollouts.tool_registry import _PYTHON_BOOTSTRAP

    started = time.time()
    child = subprocess.run([sys.executable, "-I", "-c", _PYTHON_BOOTSTRAP, "while True: pass", str(2**30), "1"],
                           capture_output=True, timeout=30)  # nobody kills it: only its own limit can
    assert child.returncode != 0 and time.time() - started < 10


def test_guard_turns_raise_hang_and_junk_into_counted_failures() -> None:
    def explode(x: int) -> str:
        """Fail.

        Args:
            x: anything
        """
        raise RuntimeError("boom")

    def hang(x: int) -> str:
        """Hang.

        Args:
            x: anything
        """
        time.sleep(5)
        return "late"

    def junk(x: int) -> object:
        """Return junk.

        Args:
            x: anything
        """
        return object()

    def long(x: int) -> str:
        """Return a lot.

        Args:
            x: anything
        """
        return "y" * 10_000

    stats = ToolStats(timeout=0.5)
    for fn, kind in [(explode, "boom"), (hang, "no answer"), (junk, "not text")]:
        with pytest.raises(ToolFailure, match=kind):
            guard(fn, stats)(x=1)
    assert "truncated" in guard(long, stats)(x=1) and len(guard(long, stats)(x=1)) < 2100
    assert (stats.calls, stats.failures, stats.timeouts, stats.junk_results) == (5, 3, 1, 1)
    from transformers.utils import get_json_schema

    assert get_json_schema(guard(explode, stats))["function"]["name"] == "explode"  # TRL still sees the signature


class Shop:
    """A stateful environment: a basket per rollout."""

    def reset(self, **row: object) -> str:
        self.basket: list[str] = []
        return " (the shop is open)"

    def add(self, item: str) -> str:
        """Put an item in the basket.

        Args:
            item: the item's name
        """
        if item == "bomb":
            raise ValueError("not sold here")
        self.basket.append(item)
        return f"{len(self.basket)} items"


def add(item: str) -> str:
    """Add an item to a list.

    Args:
        item: the item
    """
    return item


def test_a_tool_and_an_environment_method_of_one_name_are_refused_naming_both() -> None:
    """TRL would join the two lists silently, and the model would see two tools named `add`."""
    from hello_agents_rl.workflows.actions import parse

    with pytest.raises(ConfigError, match=r"`tools` and `environment`: both have a tool named 'add' \(the tool 'add' "
                                          r"and the environment's method add\)"):
        parse({"action": "train", "tools": [add], "environment": Shop})
    assert parse({"action": "train", "tools": ["calculator"], "environment": Shop}).environment is Shop


def test_environment_methods_are_guarded_and_keep_their_schema() -> None:
    from transformers.utils import get_json_schema

    stats = ToolStats()
    env = guarded_environment(Shop, stats)()
    env.reset()
    assert env.add(item="tea") == "1 items"
    with pytest.raises(ToolFailure, match="not sold"):
        env.add(item="bomb")
    assert type(env).__name__ == "Shop" and (stats.calls, stats.failures) == (2, 1)
    assert get_json_schema(env.add)["function"]["parameters"]["required"] == ["item"]


# --- validation: ConfigError naming the key and the fix, before anything loads ---------------------------------


def _bad(params: dict, *fragments: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RLTrainingTool().run({"action": "train", "algorithm": "grpo", "output_dir": "/tmp/never-written", **params})
    for fragment in fragments:
        assert fragment in str(caught.value), (fragment, str(caught.value))
    assert not Path("/tmp/never-written").exists()


def no_hints(x):
    """No type hints.

    Args:
        x: a value
    """
    return x


def no_docstring(x: int) -> int:
    return x


class NoReset:
    def act(self, x: int) -> str:
        """Act.

        Args:
            x: a value
        """
        return ""


def test_bad_tool_specs_are_config_errors() -> None:
    _bad({"tools": ["calculater"]}, "`tools[0]`", "did you mean `calculator`")
    _bad({"tools": [no_hints]}, "`tools[0]`", "type hints", "Args:")
    _bad({"tools": [no_docstring]}, "`tools[0]`", "docstring")
    _bad({"tools": ["no_such_pkg.mod:fn"]}, "`tools[0]`", "cannot import 'no_such_pkg.mod'")
    _bad({"tools": ["json:dumpz"]}, "`tools[0]`", "has no attribute 'dumpz'; did you mean")
    _bad({"tools": [Shop]}, "`tools[0]`", "environment")
    _bad({"environment": NoReset}, "`environment`", "reset")
    _bad({"environment": "tests.test_agentic:Nope"}, "`environment`")
    _bad({"tools": ["calculator"], "max_tool_turns": 0}, "`max_tool_turns`")
    _bad({"tools": ["calculator"], "tool_reward": {"failed_call_penalty": 0.5}, "max_tool_turns": 4},
         "`tool_reward`", "wrong answer could outscore")
    _bad({"tools": ["calculator"], "tool_reward": {"call_bonsu": 0.1}}, "did you mean `call_bonus`")
    _bad({"algorithm": "sft", "environment": Shop}, "`environment`", "SFT")
    with pytest.raises(ConfigError, match="`tools\\[0\\]`"):
        RLTrainingTool().run({"action": "evaluate", "model_path": "/tmp", "tools": ["calc"]})


def test_good_specs_validate(tmp_path: Path) -> None:
    from hello_agents_rl.workflows.actions import parse

    cfg = parse({"action": "train", "tools": ["calculator", "tests.test_agentic:documented"], "environment":
                 "tests.test_agentic:Shop", "tool_reward": {"call_bonus": 0.1, "failed_call_penalty": 0.1},
                 "max_tool_turns": 4, "output_dir": str(tmp_path / "o")})
    assert cfg.max_tool_turns == 4 and [t.__name__ for t in resolve_tools(cfg.tools)] == ["calculator", "documented"]


def documented(city: str, days: int = 1) -> str:
    """Weather forecast.

    Args:
        city: where
        days: how many days ahead
    """
    return f"sunny in {city}"


def test_chat_template_without_tools_is_refused_before_the_model_loads(tiny_model: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import hello_agents_rl.trainers.run as run  # imported before patching: the patch must not outlive the test

    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("the model must not load"))
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as caught:
        RLTrainingTool().run({"action": "train", "algorithm": "grpo", "model_name": tiny_model, "dataset": "multiplication",
                              "tools": ["calculator"], "output_dir": str(out)})
    message = str(caught.value)
    assert "`tools`" in message and "Qwen3" in message and "response_template" in message
    assert not out.exists()


# --- trajectory rewards -----------------------------------------------------------------------------------------


def _call(expression: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}]}


RIGHT = [_call("347 * 56"), {"role": "tool", "name": "calculator", "content": "19432"},
         {"role": "assistant", "content": "Final Answer: 19432"}]
FAILED_THEN_RIGHT = [_call("347 x"), {"role": "tool", "name": "calculator", "content": "{'error': 'bad'}"},
                     *RIGHT]
WRONG_WITH_CALL = [_call("347 * 56"), {"role": "tool", "name": "calculator", "content": "19432"},
                   {"role": "assistant", "content": "Final Answer: 20820"}]
ANSWER_BEFORE_CALL = [{"role": "assistant", "content": "Final Answer: 19432",
                       "tool_calls": _call("1")["tool_calls"]}, {"role": "tool", "name": "calculator", "content": "1"},
                      {"role": "assistant", "content": "Final Answer: 7"}]
OUT_OF_TURNS = [_call("347 * 56"), {"role": "tool", "name": "calculator", "content": "19432"}, _call("1 + 1")]


def test_accuracy_reads_the_answer_after_the_last_tool_call() -> None:
    reward = build_reward("accuracy", max_tool_turns=4)
    scores = [reward.score(c, "19432") for c in (RIGHT, WRONG_WITH_CALL, ANSWER_BEFORE_CALL, OUT_OF_TURNS,
                                                 "Final Answer: 19432")]
    assert scores == [1.0, 0.0, 0.0, 0.0, 1.0]
    t = read_trajectory(FAILED_THEN_RIGHT)
    assert (t.calls, t.failed_calls, t.turns_exhausted) == (2, 1, False)
    assert read_trajectory(OUT_OF_TURNS).turns_exhausted


def test_a_rollout_that_ended_on_a_call_says_whether_the_turns_or_the_token_budget_ran_out() -> None:
    # two call turns: past a limit of 1 the turns ran out; within a limit of 4 the budget did (TRL drops the round
    # whose result would not fit in max_new_tokens, so the rollout ends on that call)
    assert read_trajectory(OUT_OF_TURNS).stopped_by(1) == "turns"
    assert read_trajectory(OUT_OF_TURNS).stopped_by(4) == "budget"
    assert read_trajectory(FAILED_THEN_RIGHT).stopped_by(1) is None


def test_shaping_never_lets_a_wrong_answer_outscore_a_right_one() -> None:
    turns = 3
    build_reward("accuracy", None, {"call_bonus": 0.2, "failed_call_penalty": 0.8 / turns}, turns)  # a tie at worst
    reward = build_reward("accuracy", None, {"call_bonus": 0.2, "failed_call_penalty": 0.25}, turns)
    worst_right = [m for _ in range(5) for m in FAILED_THEN_RIGHT[:2]] + RIGHT[2:]  # 5 failed calls, then right
    right = reward.score(worst_right, "19432")
    best_wrong = reward.score(WRONG_WITH_CALL, "19432")  # a good call, a wrong answer
    assert best_wrong == pytest.approx(0.2) and right == pytest.approx(0.25) and right > best_wrong
    assert reward.score(RIGHT, "19432") == pytest.approx(1.2)
    with pytest.raises(ConfigError, match="`tool_reward`.*wrong answer could outscore"):
        build_reward("accuracy", None, {"call_bonus": 0.2, "failed_call_penalty": 0.3}, turns)
    with pytest.raises(ConfigError, match="`tool_reward`.*length_penalty"):  # it counts against the same budget
        build_reward("length_penalty", {"penalty_weight": 0.6}, {"call_bonus": 0.5}, 1)
    with pytest.raises(ConfigError, match="`tool_reward.call_bonus`"):
        build_reward("accuracy", None, {"call_bonus": -0.1}, turns)


def test_custom_reward_gets_the_trajectory_and_its_tool_stats() -> None:
    seen = {}

    def judge(completion: str, ground_truth: str, trajectory: list, tool_stats: dict) -> float:
        seen.update(text=completion, n=len(trajectory), stats=tool_stats)
        return 0.5

    fn = to_trl_reward(build_reward(judge, max_tool_turns=4))
    logged = {}
    assert fn(prompts=[[]], completions=[FAILED_THEN_RIGHT], ground_truth=["19432"],
              log_metric=lambda k, v: logged.__setitem__(k, v)) == [0.5]
    assert seen["text"] == "Final Answer: 19432" and seen["n"] == 5
    assert seen["stats"] == {"calls": 2, "failed_calls": 1, "malformed_calls": 0, "turns_exhausted": False,
                             "tool_turns": 2}
    assert logged["tools/call_rate"] == 1.0 and logged["format"] == 1.0


def _flaky_judge(completion: str, ground_truth: str) -> float:
    """A custom reward that fails on some completions (a judge service that times out)."""
    if "20820" in completion:
        raise RuntimeError("judge service down")
    return 1.0


def test_a_failing_custom_reward_in_a_tool_run_is_left_out_like_in_a_plain_run(tmp_path: Path) -> None:
    from hello_agents_rl.trainers.tool_run import trajectory_reward
    from hello_agents_rl.workflows.actions import parse

    cfg = parse({"action": "train", "algorithm": "grpo", "tools": ["calculator"], "reward_type": _flaky_judge,
                 "output_dir": str(tmp_path / "o")})
    adapter = trajectory_reward(cfg)  # what the tool run hands TRL
    completions = [RIGHT, WRONG_WITH_CALL, FAILED_THEN_RIGHT, WRONG_WITH_CALL]
    scores = adapter(prompts=[[{"role": "user", "content": "What is 347 * 56?"}]] * 4, completions=completions,
                     completion_ids=[[1]] * 4, ground_truth=["19432"] * 4, trainer_state=None,
                     log_extra=lambda *a: None, log_metric=lambda *a: None)
    assert scores == [1.0, None, 1.0, None], "None: TRL leaves it out of its group, as in a plain run"
    assert adapter.failures == 2 and "judge service down" in adapter.first_failure


@pytest.mark.slow
def test_a_tool_run_survives_a_failing_custom_reward_and_counts_the_failures(tmp_path: Path) -> None:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
    from hello_agents_rl.tasks.multiplication import make_dataset

    model = str(build_tiny_tool_model(tmp_path / "tiny", seed=0))
    scored = []

    def every_other_fails(completion: str, ground_truth: str) -> float:
        scored.append(completion)
        if len(scored) % 2:
            raise RuntimeError("judge service down")
        return 1.0

    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": model, "dataset": make_dataset("train", 4, seed=1),
        "tools": ["calculator"], "max_tool_turns": 2, "max_steps": 2, "batch_size": 2, "num_generations": 2,
        "max_new_tokens": 16, "logging_steps": 1, "use_lora": False, "reward_type": every_other_fails,
        "output_dir": str(tmp_path / "out"), "report_to": "none"})
    assert result["status"] == "completed"
    assert len(scored) == 8 and result["reward_failures"] == 4, "every failure counted, as in a plain run"
    assert result["average_reward"] == 1.0, "failures are left out, not averaged in"
    assert any("left out of their groups" in d and "judge service down" in d for d in result["diagnostics"])


def test_multiplication_dataset_holds_out_its_test_questions() -> None:
    from hello_agents_rl.tasks.multiplication import make_dataset, split_pairs

    assert not set(split_pairs("test")) & set(split_pairs("train")) and len(split_pairs("test")) == 250
    demos = make_dataset("train", 400, seed=0, tool_rate=0.3)
    calls = sum(bool(c[0]["tool_calls"]) for c in demos["completion"])
    assert 80 < calls < 160
    for row in demos:
        final = row["completion"][-1]["content"]
        assert (final == f"Final Answer: {row['ground_truth']}") == bool(row["completion"][0]["tool_calls"])


def test_importing_the_agentic_checks_loads_no_engine() -> None:
    import subprocess

    code = "import sys, hello_agents_rl.rollouts.checks; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# --- monitoring: the console line and the doctor's tool rules -----------------------------------------------------


def _tool_logs(n: int = 20, **overrides: float) -> list[dict]:
    return [{"reward": 0.2 + 0.03 * i, "kl": 0.01 + 0.002 * i, "loss": 0.1, "frac_reward_zero_std": 0.3,
             "completions/clipped_ratio": 0.05, "format": 0.9, "tools/call_frequency": 0.9,
             "tools/failure_frequency": 0.05, "tools/call_rate": 0.9, "tools/turns_exhausted": 0.02, **overrides}
            for i in range(n)]


def _doctor(stream: list[dict]) -> list[str]:
    from hello_agents_rl.trainers.doctor import Doctor

    doctor = Doctor(learning_rate=5e-5, kl_coef=0.05, max_new_tokens=64)
    for step, logs in enumerate(stream, start=1):
        doctor.observe(step, logs)
    return doctor.findings


def test_console_line_shows_the_tool_call_rate() -> None:
    from hello_agents_rl.trainers.callbacks import format_line

    line = format_line(0.5, 1, 10, 20, {"reward": 0.45, "kl": 0.023, "loss": 1.234, "tools/call_rate": 0.93})
    assert line.endswith("Reward: 0.45 | KL: 0.023 | Loss: 1.234 | Tools: 0.93")
    assert "Tools" not in format_line(0.5, 1, 10, 20, {"reward": 0.45})  # runs without tools: unchanged


def test_doctor_tool_rules_fire_with_their_remedy_and_stay_silent_when_healthy() -> None:
    assert _doctor(_tool_logs()) == []
    failing = _doctor([{**e, "tools/failure_frequency": 0.6} for e in _tool_logs()])
    assert len(failing) == 1 and "60% of tool calls failed" in failing[0] and "failed_call_penalty" in failing[0]
    looping = _doctor([{**e, "tools/turns_exhausted": 0.5} for e in _tool_logs()])
    assert len(looping) == 1 and "ran out of tool turns" in looping[0] and "max_tool_turns" in looping[0]
    # ended on a call because max_new_tokens ran out, not the turns: the remedy is the budget
    short = _doctor([{**e, "tools/turns_exhausted": 0.5, "tools/budget_exhausted": 0.4} for e in _tool_logs()])
    assert len(short) == 1 and "40% because its result no longer fitted" in short[0]
    assert "raise max_new_tokens" in short[0] and "max_tool_turns" not in short[0]
    never = _doctor([{**e, "reward": 0.1, "tools/call_frequency": 0.0, "tools/call_rate": 0.0} for e in _tool_logs()])
    assert any("no tool call" in f and "call_bonus" in f for f in never)


def test_async_tools_are_guarded_too() -> None:
    import asyncio
    import inspect

    async def slow(x: int) -> str:
        """Sleep.

        Args:
            x: seconds
        """
        await asyncio.sleep(x)
        return "done"

    stats = ToolStats(timeout=0.2)
    guarded = guard(slow, stats)
    assert inspect.iscoroutinefunction(guarded)  # TRL routes it to its event loop
    assert asyncio.run(guarded(x=0)) == "done"
    with pytest.raises(ToolFailure, match="no answer"):
        asyncio.run(guarded(x=2))
    assert (stats.calls, stats.timeouts) == (2, 1)


# --- evaluation with tools: the loop, its metrics and the comparison table ------------------------------------------


def test_evaluation_runs_the_tool_loop_and_reports_tool_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import hello_agents_rl.rollouts.loop as loop
    from hello_agents_rl.evaluation.metrics import comparison_markdown
    from hello_agents_rl.evaluation.run import evaluate_model, write_details
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
    from hello_agents_rl.tasks.multiplication import make_dataset

    path = build_tiny_tool_model(tmp_path / "tiny", seed=0)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    rows = make_dataset("test", 3, seed=0)
    a, b = (int(x) for x in rows[0]["question"].removeprefix("What is ").removesuffix("?").split(" * "))
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%d * %d"}}\n</tool_call><|im_end|>'
    script = {  # per question: its greedy turns (the model is random: the turns are scripted, the rest is real)
        0: [call % (a, b), f"Final Answer: {a * b}<|im_end|>"],  # a call, then the right answer
        1: ["Final Answer: 7<|im_end|>"],  # no call, wrong
        2: [call % (a, b)] * 3,  # calls until the turns run out
    }
    seen: dict[int, int] = {}

    def scripted(model, tokenizer, sequences, max_new_tokens, eos_ids, temperature=0.0):
        out = []
        for ids in sequences:
            question = next(i for i in script if rows[i]["question"] in tokenizer.decode(ids))
            turn = seen.get(question, 0)
            seen[question] = turn + 1
            out.append(tokenizer(script[question][turn], add_special_tokens=False)["input_ids"])
        return out

    monkeypatch.setattr(loop, "generate_turn", scripted)
    result = evaluate_model(model, tokenizer, rows, max_new_tokens=200, tools=[calculator], max_tool_turns=2)
    assert result["accuracy"] == pytest.approx(1 / 3) and result["tool_call_rate"] == pytest.approx(2 / 3)
    assert result["mean_calls"] == pytest.approx((1 + 0 + 3) / 3) and result["turns_exhausted_rate"] == pytest.approx(1 / 3)
    assert result["failed_call_rate"] == 0.0
    first = result["details"][0]["transcript"]
    assert [m["role"] for m in first] == ["assistant", "tool", "assistant"] and first[1]["content"] == str(a * b)
    write_details(tmp_path / "eval_details.jsonl", result["details"])
    assert json.loads((tmp_path / "eval_details.jsonl").read_text().splitlines()[0])["transcript"][1]["role"] == "tool"
    table = comparison_markdown([{"model": "grpo", **{k: v for k, v in result.items() if k != "details"}}])
    assert "| Tool calls | Failed calls | Calls/question | Out of turns |" in table and "66.7%" in table


def test_plain_and_tool_evaluation_run_through_the_one_rollout_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hello_agents_rl.rollouts.loop as loop
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    model = str(build_tiny_tool_model(tmp_path / "tiny", seed=0))
    turns: list[tuple[int, int]] = []  # (sequences in the batch, their longest length) per call of the loop's model

    def scripted(model, tokenizer, sequences, max_new_tokens, eos_ids, temperature=0.0):
        turns.append((len(sequences), max(map(len, sequences))))
        out = []
        for ids in sequences:
            text = tokenizer.decode(ids)
            a, b = (int(x) for x in text.rsplit("What is ", 1)[1].split("?")[0].split(" * "))
            calls_first = "Tools: calculator" in text and "<tool_response>" not in text  # the prompt lists the tool
            call = '{"name": "calculator", "arguments": {"expression": "' + f'{a} * {b}' + '"}}'
            reply = (f"<tool_call>\n{call}\n</tool_call><|im_end|>" if calls_first else f"Final Answer: {a * b}<|im_end|>")
            out.append(tokenizer(reply, add_special_tokens=False)["input_ids"])
        return out

    monkeypatch.setattr(loop, "generate_turn", scripted)
    params = {"action": "evaluate", "model_path": model, "dataset": "multiplication", "max_samples": 3,
              "max_new_tokens": 64, "return_details": True}
    plain = RLTrainingTool().run({**params, "tools": []})  # the task's calculator left out: plain answers
    assert len(turns) == 1 and turns[0][0] == 3, "a plain evaluation is one turn, all questions in one batch"
    assert plain["accuracy"] == 1.0 and "tool_call_rate" not in plain
    assert [d["completion"] for d in plain["details"]] == [f"Final Answer: {d['ground_truth']}" for d in plain["details"]]
    turns.clear()
    with_tools = RLTrainingTool().run({**params, "tools": ["calculator"]})
    assert [n for n, _ in turns] == [3, 3] and turns[1][1] > turns[0][1], "a call, then the answer after its result"
    assert with_tools["accuracy"] == 1.0 and with_tools["tool_call_rate"] == 1.0 and with_tools["tool_stats"]["calls"] == 3
    assert [m["role"] for m in with_tools["details"][0]["transcript"]] == ["assistant", "tool", "assistant"]


def test_the_same_keys_on_the_cli_and_in_yaml(tmp_path: Path) -> None:
    from hello_agents_rl.interfaces.cli import build_parser, params_from_args
    from hello_agents_rl.workflows.actions import parse

    config = tmp_path / "run.yaml"
    config.write_text("algorithm: grpo\ntools: [calculator]\nmax_tool_turns: 3\ntool_reward: {call_bonus: 0.1}\n")
    args, extra = build_parser().parse_known_args(
        ["train", "--config", str(config), "--tools", "[calculator, python]", "--output_dir", str(tmp_path / "o")])
    cfg = parse(params_from_args(args, "train", extra))
    assert cfg.tools == ["calculator", "python"] and cfg.max_tool_turns == 3 and cfg.tool_reward == {"call_bonus": 0.1}
    args, extra = build_parser().parse_known_args(["demo", "--task", "tools", "--quick"])
    assert args.task == "tools"


def test_tiny_tool_model_from_the_cli(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoTokenizer

    from hello_agents_rl.interfaces.cli import run
    from hello_agents_rl.rollouts.template import template_problem

    assert run(["tiny-model", str(tmp_path / "tiny"), "--tools"]) == 0
    assert capfd.readouterr().out == f"{tmp_path / 'tiny'}\n"  # the path alone, for $(...) in a shell script
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tiny")
    assert template_problem(tokenizer) is None  # what the ConfigError for other templates points to


def test_the_prompt_names_each_tools_parameters() -> None:
    # a model cannot guess an argument's name: a call with another one (`args`) fails; the tiny model keeps the
    # line its demos were measured with
    from transformers.utils import get_json_schema

    from hello_agents_rl.models.tiny_tool_model import tool_tokenizer
    from hello_agents_rl.rollouts.template import add_tool_template
    from hello_agents_rl.rollouts.tool_registry import calculator, python

    as_dict = {"type": "function", "function": {"name": "search", "description": "Search.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}}}}}
    bare = {"type": "function", "function": {"name": "now", "description": "The time."}}
    tools = [get_json_schema(calculator), get_json_schema(python), as_dict, bare]
    question = [{"role": "user", "content": "hi"}]
    text = add_tool_template(tool_tokenizer()).apply_chat_template(question, tools=tools, tokenize=False)
    assert "Tools: calculator(expression) python(code) search(query, top_k) now()." in text
    tiny = tool_tokenizer().apply_chat_template(question, tools=tools, tokenize=False)
    assert "Tools: calculator python search now." in tiny


def test_demo_report_shows_tool_metrics_before_and_after(tmp_path: Path) -> None:
    import json

    from hello_agents_rl.workflows.demo_tool_use import eval_details, write_report

    metrics = dict(failed_call_rate=0.0, mean_calls=0.0, turns_exhausted_rate=0.0, num_questions=1)
    results = {"task": "tools", "seed": 0, "sft": {**metrics, "accuracy": 0.0, "tool_call_rate": 0.0},
               "grpo": {**metrics, "accuracy": 1.0, "tool_call_rate": 1.0, "mean_calls": 1.0}}
    row = {"question": "What is 347 * 56?", "ground_truth": "19432"}
    for key, correct, transcript in (("sft", False, [{"role": "assistant", "content": "Final Answer: 20820"}]),
                                     ("grpo", True, RIGHT)):
        (tmp_path / key).mkdir()
        (tmp_path / key / "eval_details.jsonl").write_text(json.dumps({**row, "correct": correct, "transcript": transcript}))
    report = write_report(tmp_path, results, eval_details(tmp_path)).read_text()
    assert "| SFT | 0.0% | 0.0% |" in report and "| GRPO | 100.0% | 100.0% |" in report
    assert "call calculator({'expression': '347 * 56'})" in report and "- tool: 19432" in report


def test_sft_on_transcripts_trains_the_assistant_tokens_only(tmp_path: Path) -> None:
    from hello_agents_rl.models import load_model, load_tokenizer
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
    from hello_agents_rl.tasks.multiplication import make_dataset
    from hello_agents_rl.trainers.build import build_trainer
    from hello_agents_rl.workflows.actions import parse

    model = str(build_tiny_tool_model(tmp_path / "tiny", seed=0))
    rows = make_dataset("train", 4, seed=0, tool_rate=1.0)
    cfg = parse({"action": "train", "algorithm": "sft", "model_name": model, "dataset": rows, "tools": ["calculator"],
                 "output_dir": str(tmp_path / "sft"), "use_lora": False, "report_to": "none", "max_steps": 1})
    tokenizer = load_tokenizer(model)
    trainer = build_trainer(cfg, load_model(model), tokenizer, rows, None, None, [], "cpu", False)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    trained = tokenizer.decode(ids[labels != -100])
    untrained = tokenizer.decode(ids[labels == -100])
    answer = rows[0]["ground_truth"]
    assert "<tool_call>" in trained and f"Final Answer: {answer}" in trained  # the assistant's two turns
    assert "<tool_response>" in untrained and "Tools: calculator" in untrained  # the tool result and the prompt
    assert "<tool_response>" not in trained and trained.count(answer) == 1  # the result is not learned as output
