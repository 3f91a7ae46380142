"""The tool guards under abuse: async tools that raise what is not an Exception, tools that never answer,
environments whose reset raises. Each is contained: a counted failure, a bounded number of threads, a clear
ConfigError when it fails before training, a doctor finding when it keeps happening."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.rollouts.tool_guard import (
    MAX_HUNG_CALLS,
    TOOL_TIMEOUT_S,
    ToolStats,
    guard,
    guarded_environment,
    reset_failure,
)
from hello_agents_rl.rollouts.tool_registry import ToolFailure, probe_environment


def test_the_default_tool_timeout_is_the_guards() -> None:
    from hello_agents_rl.config import TrainConfig

    assert TrainConfig.model_fields["tool_timeout"].default == TOOL_TIMEOUT_S == ToolStats().timeout


@pytest.mark.parametrize("value", [0, -1, "soon"])
def test_tool_timeout_must_be_a_positive_number(value: object, tmp_path: Path) -> None:
    from hello_agents_rl.workflows.actions import parse

    params = {"action": "train", "tools": ["calculator"], "output_dir": str(tmp_path / "o")}
    assert parse({**params, "tool_timeout": "1e-1"}).tool_timeout == 0.1
    with pytest.raises(ConfigError) as caught:
        parse({**params, "tool_timeout": value})
    assert str(caught.value).startswith("`tool_timeout`: Input should be")


# --- 10: an async tool raising KeyboardInterrupt or SystemExit ----------------------------------------------------


@pytest.mark.parametrize("escape", [KeyboardInterrupt, SystemExit])
def test_an_async_tool_raising_keyboardinterrupt_or_systemexit_is_a_failed_call(escape: type) -> None:
    """On the daemon event loop TRL runs async tools on: the call fails, counted, and the loop lives on."""
    from trl.trainer.utils import shutdown_event_loop_in_daemon, start_event_loop_in_daemon

    async def bail(x: int) -> str:
        """Give up.

        Args:
            x: anything
        """
        raise escape("bye")

    async def fine(x: int) -> str:
        """Answer.

        Args:
            x: anything
        """
        return f"ok {x}"

    class Desk:
        def reset(self, **row: object) -> None:
            return None

        async def leave(self, x: int) -> str:
            """Leave.

            Args:
                x: anything
            """
            raise escape("bye")

    stats = ToolStats(timeout=5)
    thread, loop, ready = start_event_loop_in_daemon(name="tools-test")
    ready.wait()
    try:
        for call in (guard(bail, stats), guarded_environment(Desk, stats)().leave):
            with pytest.raises(ToolFailure, match=escape.__name__):
                asyncio.run_coroutine_threadsafe(call(x=1), loop).result(timeout=10)
        assert thread.is_alive(), "the loop TRL awaits every async tool on must survive"
        assert asyncio.run_coroutine_threadsafe(guard(fine, stats)(x=2), loop).result(timeout=10) == "ok 2"
    finally:
        shutdown_event_loop_in_daemon(thread, loop)
    assert (stats.calls, stats.failures) == (3, 2) and escape.__name__ in stats.first_error


# --- 12: tool_timeout, and hung calls that cannot pile up -----------------------------------------------------------


def test_a_tool_that_never_answers_times_out_and_its_threads_stay_bounded() -> None:
    release = threading.Event()

    def stuck(x: int) -> str:
        """Wait for ever.

        Args:
            x: anything
        """
        release.wait()
        return "late"

    stats = ToolStats(timeout=0.5)
    tool = guard(stuck, stats)
    threads = lambda: sum(t.name == "tool-stuck" and t.is_alive() for t in threading.enumerate())  # noqa: E731
    try:
        started = time.monotonic()
        messages = []
        for _ in range(3 * MAX_HUNG_CALLS):
            with pytest.raises(ToolFailure) as caught:
                tool(x=1)
            messages.append(str(caught.value))
            assert threads() <= MAX_HUNG_CALLS
        elapsed = time.monotonic() - started
        assert messages[0] == "stuck: no answer after 0.5 s (tool_timeout)"
        assert sum("no answer" in m for m in messages) == MAX_HUNG_CALLS, "the rest fail at once, no new thread"
        assert f"hung {MAX_HUNG_CALLS} times" in messages[-1] and "still running" in messages[-1]
        assert elapsed < MAX_HUNG_CALLS * 0.5 + 2
        assert (stats.timeouts, stats.refused, stats.failures) == (MAX_HUNG_CALLS, 2 * MAX_HUNG_CALLS, 3 * MAX_HUNG_CALLS)
        assert stats.summary()["hung_by_tool"] == {"stuck": MAX_HUNG_CALLS}
        assert stats.summary()["calls_by_tool"] == {"stuck": 3 * MAX_HUNG_CALLS}  # refused calls are calls too
    finally:
        release.set()
    for _ in range(100):  # once its calls return, the tool is called again
        if threads() == 0:
            break
        time.sleep(0.05)
    assert tool(x=1) == "late"


def test_the_doctor_reports_a_tool_that_keeps_hanging_once_with_its_remedy() -> None:
    from hello_agents_rl.trainers.doctor import Doctor

    stats = ToolStats(timeout=0.5)
    doctor = Doctor(learning_rate=5e-5, kl_coef=0.05, max_new_tokens=64, tools=stats)
    logs = {"reward": 0.5, "kl": 0.01, "loss": 0.1, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.1}
    assert doctor.observe(1, logs) == []
    for _ in range(3):
        stats.timed_out("lookup")
    found = doctor.observe(2, logs)
    assert len(found) == 1 and "tool 'lookup' hung 3 times" in found[0]
    assert "raise tool_timeout" in found[0] and "fix the tool" in found[0] and "0.5 s" in found[0]
    stats.timed_out("lookup")
    assert doctor.observe(3, logs) == [], "reported once, not at every log"


# --- 11: an environment whose reset raises ---------------------------------------------------------------------------


class Picky:
    """Resets only on questions it knows."""

    def reset(self, **row: object) -> str:
        if "7" in str(row.get("question")):
            raise RuntimeError("no sevens here")
        self.seen = row["question"]
        return ""

    def look(self, what: str) -> str:
        """Look at something.

        Args:
            what: the thing
        """
        return f"{what} in {self.seen}"


def _rows(*questions: str) -> list[dict]:
    return [{"question": q, "prompt": [{"role": "user", "content": q}], "ground_truth": "1"} for q in questions]


def test_a_reset_that_fails_on_the_first_rows_is_a_config_error_naming_the_class_and_the_row() -> None:
    probe_environment(Picky, _rows("1 + 1", "2 + 2", "7 + 7"))  # only the first rows are tried
    with pytest.raises(ConfigError) as caught:
        probe_environment(Picky, _rows("1 + 1", "3 + 7"))
    message = str(caught.value)
    assert message.startswith(f"`environment`: {Picky.__module__}.Picky.reset failed on row 1 of the training data")
    assert "'3 + 7'" in message and "RuntimeError: no sevens here" in message and "Fix:" in message


def test_a_reset_that_fails_later_is_a_counted_failure_and_its_tools_fail() -> None:
    stats = ToolStats()
    env_class = guarded_environment(Picky, stats)
    good, bad = env_class(), env_class()
    good.reset(**_rows("1 + 1")[0])
    assert bad.reset(**_rows("7 + 7")[0]) is None and "no sevens here" in reset_failure(bad)
    assert good.look(what="a cat") == "a cat in 1 + 1" and reset_failure(good) is None
    with pytest.raises(ToolFailure, match="Picky.reset failed on this row"):
        bad.look(what="a cat")
    bad.reset(**_rows("2 + 2")[0])  # the instance is reused for another row: whole again
    assert reset_failure(bad) is None and bad.look(what="a dog") == "a dog in 2 + 2"
    assert (stats.reset_failures, stats.calls, stats.failures) == (1, 3, 1)


def test_a_failed_reset_scores_its_rollout_as_a_failed_reward(tmp_path: Path) -> None:
    from hello_agents_rl.trainers.tool_run import trajectory_reward
    from hello_agents_rl.workflows.actions import parse

    cfg = parse({"action": "train", "algorithm": "grpo", "environment": Picky, "output_dir": str(tmp_path / "o")})
    reward = trajectory_reward(cfg)
    env_class = guarded_environment(Picky, ToolStats())
    environments = [env_class(), env_class()]
    environments[0].reset(**_rows("1 + 1")[0])
    environments[1].reset(**_rows("7 + 7")[0])
    answer = [{"role": "assistant", "content": "Final Answer: 1"}]
    scores = reward(prompts=[[]] * 2, completions=[answer, answer], completion_ids=[[1]] * 2, ground_truth=["1", "1"],
                    environments=environments, trainer_state=None, log_extra=lambda *a: None, log_metric=lambda *a: None)
    assert scores == [1.0, None], "None: left out of its group, as a failed reward is"
    assert reward.failures == 1 and "no sevens here" in reward.first_failure


# --- in real runs: train and evaluate ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    return str(build_tiny_tool_model(tmp_path_factory.mktemp("tiny_tools") / "model", seed=0))


class Broken:
    """An environment whose reset fails for every row."""

    def reset(self, **row: object) -> None:
        raise KeyError("level")

    def move(self, step: int) -> str:
        """Move.

        Args:
            step: how far
        """
        return "moved"


class Flaky(Broken):
    """Resets fine for the probe's rows, then fails every other time."""

    resets = 0

    def reset(self, **row: object) -> None:
        Flaky.resets += 1
        if Flaky.resets > 2 and Flaky.resets % 2:
            raise KeyError("level")


RUN = {"action": "train", "algorithm": "grpo", "dataset": "multiplication", "max_samples": 4, "max_steps": 2,
       "batch_size": 2, "num_generations": 2, "max_new_tokens": 12, "logging_steps": 1, "max_tool_turns": 1,
       "use_lora": False, "report_to": "none"}


def test_train_refuses_an_environment_whose_reset_fails_before_the_model_loads(
        tool_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hello_agents_rl.trainers.run as run

    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("the model must not load"))
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as caught:
        run.train(run.TrainConfig(**{**RUN, "model_name": tool_model, "environment": Broken, "output_dir": str(out)}))
    assert f"{Broken.__module__}.Broken.reset failed on row 0 of the training data" in str(caught.value)
    assert "KeyError" in str(caught.value) and not out.exists()


def test_evaluate_refuses_a_broken_environment_and_counts_a_flaky_one(tool_model: str) -> None:
    params = {"action": "evaluate", "model_path": tool_model, "dataset": "multiplication", "max_samples": 4,
              "max_new_tokens": 8, "max_tool_turns": 1}
    with pytest.raises(ConfigError, match="Broken.reset failed on row 0 of the evaluation data"):
        from hello_agents.tools import RLTrainingTool

        RLTrainingTool().run({**params, "environment": Broken})
    Flaky.resets = 0
    result = RLTrainingTool().run({**params, "environment": Flaky})
    assert result["status"] == "completed" and result["tool_stats"]["reset_failures"] == 2  # every other one after the probe


@pytest.mark.slow
def test_a_reset_failing_during_training_is_a_counted_failed_rollout(tool_model: str, tmp_path: Path) -> None:
    from hello_agents.tools import RLTrainingTool

    Flaky.resets = 0
    result = RLTrainingTool().run({**RUN, "model_name": tool_model, "environment": Flaky,
                                   "output_dir": str(tmp_path / "run")})
    assert result["status"] == "completed" and result["num_steps"] == 2
    assert result["tools"]["reset_failures"] == 4, "2 of the 4 rollouts of each step"
    assert result["reward_failures"] == 4 and any("Flaky.reset failed" in d for d in result["diagnostics"])


STUCK = threading.Event()


def stuck(expression: str) -> str:
    """A calculator that never answers.

    Args:
        expression: the arithmetic expression
    """
    STUCK.wait()
    return "late"


@pytest.mark.slow
def test_a_hanging_tool_in_a_training_run_times_out_stays_bounded_and_is_reported(
        tool_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's turns are scripted (a random tiny model would not call a tool): call `stuck`, or, after a tool
    result, answer. Everything else is the real run."""
    from hello_agents.tools import RLTrainingTool
    from trl import GRPOTrainer

    call = '<tool_call>\n{"name": "stuck", "arguments": {"expression": "2 * 3"}}\n</tool_call><|im_end|>'

    def scripted(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        tokenizer = self.processing_class
        replies = ["Final Answer: 6<|im_end|>" if "<tool_response>" in tokenizer.decode(ids) else call
                   for ids in prompt_ids]
        return [tokenizer(r, add_special_tokens=False)["input_ids"] for r in replies], None

    monkeypatch.setenv("HELLO_AGENTS_FAST", "0")  # TRL's own generation, which the script replaces
    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted)
    STUCK.clear()
    try:
        result = RLTrainingTool().run({**RUN, "model_name": tool_model, "tools": [stuck], "tool_timeout": 0.5,
                                       "output_dir": str(tmp_path / "run")})
        alive = sum(t.name == "tool-stuck" and t.is_alive() for t in threading.enumerate())
    finally:
        STUCK.set()
    assert result["status"] == "completed"
    tools = result["tools"]
    assert tools["timeouts"] == MAX_HUNG_CALLS and tools["refused"] == 2 * 2 * 2 - MAX_HUNG_CALLS and alive <= MAX_HUNG_CALLS
    assert tools["tool_timeout_s"] == 0.5 and "no answer after 0.5 s" in tools["first_error"]
    hung = [d for d in result["diagnostics"] if "tool 'stuck' hung" in d]
    assert len(hung) == 1 and "raise tool_timeout" in hung[0]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert any("tool 'stuck' hung" in d for d in saved["diagnostics"])


def test_evaluate_gives_its_tool_timeout_to_the_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tool_timeout` is an evaluate key too (a pipeline's or search's evaluation inherits the run's)."""
    from hello_agents_rl.config.evaluate import EVALUATION_KEYS
    from hello_agents_rl.evaluation import run as evaluation
    from hello_agents_rl.workflows.actions import parse

    seen: list[float] = []

    class Seen(Exception):
        pass

    def rollouts(*args: object, stats: ToolStats, **kwargs: object) -> None:
        seen.append(stats.timeout)
        raise Seen

    monkeypatch.setattr(evaluation, "roll_out", rollouts)
    cfg = parse({"action": "evaluate", "model_path": "m", "tools": ["calculator"], "tool_timeout": 0.5})
    with pytest.raises(Seen):
        evaluation.evaluate_config(None, None, [], cfg)
    assert seen == [0.5] and "tool_timeout" in EVALUATION_KEYS


def test_the_runs_failed_call_rate_is_its_failures_over_its_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's result once gave failures 23 of 27 calls beside failed_call_rate 0.0 (the last step's)."""
    from types import SimpleNamespace

    from hello_agents_rl.trainers import tool_run

    stats = ToolStats()
    stats.calls, stats.failures = 27, 23
    monkeypatch.setattr(tool_run, "stats_of", lambda _: stats)
    result = tool_run.tool_results(SimpleNamespace(fast_path=None), [
        {"tools/call_frequency": 1.0, "tools/failure_frequency": 0.0, "tools/call_rate": 1.0}])
    assert result["calls"] == 27 and result["failures"] == 23
    assert result["failed_call_rate"] == pytest.approx(23 / 27)
