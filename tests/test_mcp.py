"""The MCP server end to end with the official SDK's own client over stdio, as an agent would drive it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client

from hello_agents_rl import ConfigError
from hello_agents_rl.interfaces.mcp_server import RLServer

TINY_TRAIN = {"algorithm": "grpo", "dataset": "arithmetic", "max_samples": 8, "max_steps": 2, "batch_size": 2,
              "num_generations": 2, "max_new_tokens": 8, "logging_steps": 1, "save_steps": 100, "use_lora": False,
              "report_to": "none"}


def _payload(result) -> dict:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _drive(roots: list[Path], jobs_dir: Path, calls) -> None:
    args = ["-m", "hello_agents_rl.interfaces.cli", "mcp", "--jobs-dir", str(jobs_dir)]
    for root in roots:
        args += ["--root", str(root)]
    env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    if "PYTHONPATH" in os.environ:  # a checkout run with PYTHONPATH=src serves its own sources, not the installed ones
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    with (jobs_dir.parent / "server.err").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await calls(session)


@pytest.mark.slow
def test_an_agent_lists_tools_trains_polls_and_reads_the_result(tiny_model: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: dict = {}

    async def calls(session: ClientSession) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert {"train", "evaluate", "pipeline", "job_status", "job_cancel", "job_result", "job_list"} <= set(tools)
        assert tools["train"].input_schema["properties"]["num_generations"]["minimum"] == 2

        bad = await session.call_tool("train", {**TINY_TRAIN, "kl_coeff": 0.1})  # the book's typo
        assert bad.is_error and "`kl_coeff`" in bad.content[0].text and "kl_coef" in bad.content[0].text
        outside = await session.call_tool("train", {**TINY_TRAIN, "output_dir": "/tmp/elsewhere"})
        assert outside.is_error and "`output_dir`" in outside.content[0].text and "outside" in outside.content[0].text
        remote = await session.call_tool("evaluate", {"model_path": tiny_model, "trust_remote_code": True})
        assert remote.is_error and "`trust_remote_code`" in remote.content[0].text

        job = _payload(await session.call_tool("train", {**TINY_TRAIN, "model_name": tiny_model, "output_dir": str(out)}))
        assert job["state"] == "running"
        with anyio.fail_after(180):
            while (status := _payload(await session.call_tool("job_status", {"job_id": job["job_id"]})))["state"] in (
                    "running", "cancelling"):
                seen.setdefault("lines", []).append(status["line"])
                await anyio.sleep(1)
        assert status["state"] == "completed", status
        assert (status["step"], status["total"]) == (2, 2)
        seen["result"] = _payload(await session.call_tool("job_result", {"job_id": job["job_id"]}))
        seen["answer"] = _payload(await session.call_tool("evaluate", {
            "model_path": seen["result"]["model_path"], "dataset": "arithmetic", "max_samples": 4, "max_new_tokens": 8}))
        unknown = await session.call_tool("job_result", {"job_id": "nope"})
        assert unknown.is_error and "`job_id`" in unknown.content[0].text

    anyio.run(_drive, [tmp_path, Path(tiny_model).parent], tmp_path / "jobs", calls)
    assert seen["result"]["status"] == "completed" and seen["result"]["num_steps"] == 2
    assert Path(seen["result"]["model_path"]).is_dir() and str(out) in seen["result"]["model_path"]
    # a quick action runs in place and returns the action's own dict: the same numbers as calling it here
    from hello_agents_rl.workflows.actions import run as run_action

    here = run_action({"action": "evaluate", "model_path": seen["result"]["model_path"], "dataset": "arithmetic",
                       "max_samples": 4, "max_new_tokens": 8})
    same = ("status", "model_path", "num_questions", "accuracy", "format_rate", "mean_tokens", "truncation_rate")
    assert {k: seen["answer"][k] for k in same} == {k: here[k] for k in same} and here["num_questions"] == 4


def test_the_server_refuses_paths_outside_its_roots_and_foreign_code(tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    root.mkdir()
    (tmp_path / "secret").mkdir()
    (root / "link").symlink_to(tmp_path / "secret")
    server = RLServer([root])
    refused = [
        ("train", {"output_dir": str(tmp_path / "secret" / "run")}, "output_dir"),
        ("train", {"output_dir": str(root / ".." / "secret")}, "output_dir"),
        ("train", {"output_dir": str(root / "link" / "run")}, "output_dir"),  # a symlink out is still out
        ("train", {"output_dir": str(root / "run"), "dataset": str(tmp_path / "secret" / "d.jsonl")}, "dataset"),
        ("train", {}, "output_dir"),  # the default ./models/grpo_model lies outside too
        ("train", {"output_dir": str(root / "r"), "tools": ["os:system"]}, "tools.0"),
        ("train", {"output_dir": str(root / "r"), "environment": "mypkg.envs:Shop"}, "environment"),
        ("evaluate", {"model_path": "Qwen/Qwen3-0.6B", "trust_remote_code": True}, "trust_remote_code"),
        ("pipeline", {"output_dir": str(root / "p"), "sft": {"output_dir": str(tmp_path / "x")}}, "sft.output_dir"),
        ("search", {"output_dir": str(root / "s"), "storage": "postgresql://db/x"}, "storage"),
        ("search", {"output_dir": str(root / "s"), "storage": f"sqlite:///{tmp_path}/x.db"}, "storage"),
        ("compare", {"models": {"a": str(tmp_path / "secret")}}, "models.a"),
        ("job_status", {"job_id": 3}, "job_id"),
        ("fly", {}, "unknown tool"),
    ]
    for name, arguments, key in refused:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            server.call(name, arguments)
    assert not (tmp_path / "secret" / "run").exists() and server.jobs.list() == []


def test_a_task_parameter_cannot_read_a_file_outside_the_root_over_stdio(tmp_path: Path) -> None:
    root, secret = tmp_path / "root", tmp_path / "secret.txt"
    root.mkdir()
    secret.write_text("s3cr3tPassw0rd\n")
    secret.chmod(0o600)
    (root / "words.txt").write_text("zebra\n")
    task = {"dataset": "reasoning_gym:spell_backward", "split": "test"}
    seen: dict = {}

    async def calls(session: ClientSession) -> None:
        for data_file in (str(secret), "../" * 30 + str(secret).lstrip("/")):  # the call, then `..`
            seen[data_file] = await session.call_tool("load_dataset", {
                **task, "dataset_config": {"data_file": data_file, "size": 2, "max_word_len": 100}})
        seen["inside"] = _payload(await session.call_tool("load_dataset", {
            **task, "dataset_config": {"data_file": str(root / "words.txt"), "size": 1}}))

    anyio.run(_drive, [root], tmp_path / "jobs", calls)
    inside = seen.pop("inside")
    for result in seen.values():
        text = result.content[0].text
        assert result.is_error and "`dataset_config.data_file`" in text and "s3cr3t" not in text
    assert "zebra" in inside["sample"]["prompt"][-1]["content"]


def test_relative_paths_are_judged_from_the_servers_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.chdir(tmp_path)
    server = RLServer(["runs"])  # a relative --root, as in `hello-agents-rl mcp --root runs`
    with pytest.raises(ConfigError, match="`output_dir`: out is outside"):
        server.call("train", {"output_dir": "out"})
    with pytest.raises(ConfigError, match="`dataset`: runs/../d.jsonl is outside"):
        server.call("load_dataset", {"dataset": "runs/../d.jsonl"})
    (root / "d.jsonl").write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    described = server.call("load_dataset", {"dataset": "runs/d.jsonl"})  # inside: runs, and returns its dict
    assert described["num_samples"] == 1
    trusting = RLServer([root], trust_remote_code=True).guard  # started with --trust-remote-code: the owner's choice
    trusting.check({"trust_remote_code": True, "tools": ["mypkg.tools:search"], "environment": "mypkg.envs:Shop",
                    "output_dir": str(root / "run")})
    with pytest.raises(ConfigError, match="output_dir"):  # the roots still hold
        trusting.check({"output_dir": str(tmp_path / "secret")})


def test_streamable_http_serves_the_same_tools(tmp_path: Path, http_mcp_server: Any) -> None:
    from mcp.client.streamable_http import streamable_http_client

    with http_mcp_server(tmp_path) as port:
        async def calls() -> dict:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                names = [tool.name for tool in (await session.list_tools()).tools]
                reward = _payload(await session.call_tool("create_reward", {
                    "reward_type": "accuracy", "completions": ["Final Answer: 72", "Final Answer: 7"], "ground_truth": 72}))
                return {"names": names, "reward": reward}

        got = anyio.run(calls)
        assert "train" in got["names"] and "job_status" in got["names"]
        assert got["reward"]["scores"] == [1.0, 0.0]
        assert (tmp_path / ".jobs" / "jobs.db").is_file()  # the default store lives under the first root


HUGE = "\\boxed{9^{9^{9^{9}}}}"  # math-verify's big-integer work on it holds the GIL past its own alarms


def test_an_answer_that_never_checks_does_not_stall_the_server(tiny_model: str, tmp_path: Path) -> None:
    """Every math-verify check is bounded in the server's worker threads too; the next call is answered at once."""
    import time

    from hello_agents_rl.rewards.checkers import CHECK_SECONDS

    data = tmp_path / "huge.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 2?", "answer": HUGE}) + "\n")
    took: dict[str, float] = {}

    async def calls(session: ClientSession) -> None:
        started = time.monotonic()
        huge = _payload(await session.call_tool("create_reward", {
            "completions": [f"Final Answer: {HUGE}", "Final Answer: 3"], "ground_truth": "3",
            "answer_checker": "math_verify"}))
        took["create_reward"] = time.monotonic() - started
        assert huge["scores"][1] == 1.0 and huge["scores"][0] == 0.0  # past the bound: wrong, as a time-out is
        started = time.monotonic()
        answer = _payload(await session.call_tool("evaluate", {
            "model_path": tiny_model, "dataset": str(data), "answer_checker": "math_verify", "max_new_tokens": 4}))
        took["evaluate"] = time.monotonic() - started
        assert answer["num_questions"] == 1 and answer["accuracy"] == 0.0
        started = time.monotonic()
        quick = _payload(await session.call_tool("create_reward", {
            "completions": ["Final Answer: \\frac{1}{2}"], "ground_truth": "0.5", "answer_checker": "math_verify"}))
        took["next"] = time.monotonic() - started
        assert quick["scores"] == [1.0]

    anyio.run(_drive, [tmp_path, Path(tiny_model).parent], tmp_path / "jobs", calls)
    assert took["create_reward"] < CHECK_SECONDS + 10 and took["evaluate"] < 2 * CHECK_SECONDS + 30, took
    assert took["next"] < 5, took
