"""`hello-agents-rl serve`: a trained model behind transformers' own OpenAI-compatible server, asked with `openai`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Venv
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.workflows.serve import model_folder, plan


@pytest.fixture(scope="module")
def merge_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where serve keeps its merges ($HELLO_AGENTS_CACHE/merged): a folder of the test's, never the user's cache."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HELLO_AGENTS_CACHE", str(cache))  # the served subprocess inherits it
        yield cache / "merged"


@pytest.fixture(scope="module")
def lora_run(tiny_model: str, merge_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real training run that kept only its LoRA adapter (merge_lora: false). Its learning rate changes the
    tiny model's greedy answers (measured: the first of evaluate's three) without collapsing them to whitespace."""
    run = tmp_path_factory.mktemp("served") / "run"
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "sft", "model_name": tiny_model, "output_dir": str(run),
        "dataset": "arithmetic", "max_samples": 8, "max_steps": 2, "batch_size": 4, "learning_rate": 1e-3,
        "use_lora": True, "lora_rank": 4, "lora_alpha": 8, "merge_lora": False, "report_to": "none"})
    assert result["status"] == "completed" and not (run / "model").exists() and (run / "results.json").is_file()
    return run


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_serving_a_run_without_a_merged_model_merges_it_outside_the_run(lora_run: Path, merge_cache: Path) -> None:
    before = _snapshot(lora_run)
    folder, notes = model_folder(str(lora_run))  # a run's output_dir -> its adapter -> merged by export
    merged = Path(folder)
    assert merge_cache in merged.parents and lora_run not in merged.parents, folder
    assert "merged" in notes[0] and str(merged) in notes[0]
    assert (merged / "config.json").is_file() and (merged / "tokenizer_config.json").is_file()
    again = model_folder(str(lora_run / "adapter"))  # not merged twice
    assert again == (folder, [f"serving the earlier merge of {lora_run / 'adapter'} in {merged}"])
    assert _snapshot(lora_run) == before, "nothing the run wrote was added, changed or removed"


def test_a_port_in_use_is_refused_before_the_model_loads(lora_run: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from hello_agents_rl.workflows import export, serve

    monkeypatch.setenv("HELLO_AGENTS_CACHE", str(tmp_path / "cache"))  # no earlier merge: serving would load
    loads: list[str] = []
    monkeypatch.setattr(export, "load_model", lambda source, *a, **k: loads.append(source))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"`port`: 127.0.0.1:{port} is in use"):
            serve.serve(str(lora_run), port=port, engine="transformers")
    assert loads == [] and not (tmp_path / "cache").exists()


def test_what_gets_served(tiny_model: str, lora_run: Path, tmp_path: Path) -> None:
    assert model_folder(tiny_model)[0] == str(Path(tiny_model).resolve())
    folder, _ = model_folder(str(lora_run))
    served = plan(str(lora_run), port=8123, engine="transformers")
    assert served.command[1:5] == ["-m", "hello_agents_rl.workflows.transformers_serve", "serve", folder]
    assert "8123" in served.command
    assert served.base_url == "http://127.0.0.1:8123/v1"
    with pytest.raises(ConfigError, match="`model`: .* does not exist"):
        model_folder(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="neither a model"):
        model_folder(str(tmp_path))
    with pytest.raises(ConfigError, match="`engine`"):
        plan(tiny_model, engine="tgi")


@pytest.fixture(scope="module")
def served(lora_run: Path) -> Iterator[dict]:
    """`hello-agents-rl serve` on a free port, and evaluate's greedy answers to three held-out questions."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "serve", str(lora_run), "--port", str(port),
                               "--engine", "transformers"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        evaluation = RLTrainingTool().run({"action": "evaluate", "model_path": str(lora_run), "dataset": "arithmetic",
                                           "max_samples": 3, "max_new_tokens": 12, "return_details": True})
        assert any(d["completion"].strip() for d in evaluation["details"])  # real text is compared, not empty strings
        deadline = time.monotonic() + 120
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert server.poll() is None, server.stderr.read().decode()
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.5)
        from openai import OpenAI

        base_url = f"http://127.0.0.1:{port}/v1"
        model = OpenAI(base_url=base_url, api_key="not-needed").models.list().data[0].id
        system = evaluation.get("prompt", {}).get("system_prompt")  # the system message evaluate used, if any
        yield {"base_url": base_url, "model": model, "system": system, "details": evaluation["details"]}
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_the_served_model_answers_as_evaluate_does(served: dict) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=served["base_url"], api_key="not-needed")
    for detail in served["details"]:
        messages = ([{"role": "system", "content": served["system"]}] if served["system"] else []) + [
            {"role": "user", "content": detail["question"]}]
        reply = client.chat.completions.create(model=served["model"], messages=messages, temperature=0, max_tokens=12)
        # the server strips the text around a message (the tiny model's answers may start with newlines)
        assert reply.choices[0].message.content.strip() == detail["completion"].strip(), detail["question"]


AGENT = """
import json, sys
from hello_agents import HelloAgentsLLM, SimpleAgent
from hello_agents.core.config import Config

base_url, model, system, questions = json.loads(sys.argv[1])
answers = []
for question in questions:  # one fresh agent per question: no history carried over
    llm = HelloAgentsLLM(model=model, api_key="not-needed", base_url=base_url, temperature=0, max_tokens=12)
    agent = SimpleAgent(name="solver", llm=llm, system_prompt=system, config=Config(trace_enabled=False))
    answers.append(agent.run(question))
print(json.dumps(answers))
"""


@pytest.mark.slow
def test_a_hello_agents_agent_answers_through_the_server(served: dict, fresh_venv: Callable[[], Venv]) -> None:
    """hello-agents 1.0.0 from the registry, in its own environment, pointed at the server with the model name
    docs/agentic.md's snippet gives (not the server's own id: it serves its one model under any name):
    evaluate's answers."""
    import re

    docs = (Path(__file__).resolve().parents[1] / "docs" / "agentic.md").read_text(encoding="utf-8")
    name = re.search(r'HelloAgentsLLM\(model="([^"]+)"', docs)[1]
    assert name != served["model"]
    venv = fresh_venv()
    venv.pip("install", "hello-agents==1.0.0")
    questions = [d["question"] for d in served["details"]]
    out = venv.run("-c", AGENT, json.dumps([served["base_url"], name, served["system"], questions]))
    answers = json.loads(out.strip().splitlines()[-1])
    assert [a.strip() for a in answers] == [d["completion"].strip() for d in served["details"]]  # as above


def test_8bit_loading_is_refused_where_the_hardware_cannot_and_planned_where_it_can(
        tiny_model: str, lora_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import torch

    before = sorted(p.name for p in lora_run.iterdir())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="`load_in_8bit`: .*needs a CUDA GPU"):
        plan(str(lora_run), load_in_8bit=True)
    assert sorted(p.name for p in lora_run.iterdir()) == before  # refused before the adapter was merged
    cli = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "serve", tiny_model, "--load-in-8bit",
                          "--dry-run"], capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert cli.returncode == 2 and "load_in_8bit" in cli.stderr and "Traceback" not in cli.stderr

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine (faked: none here)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes"
                        else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match="pip install bitsandbytes"):
        plan(tiny_model, load_in_8bit=True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "bitsandbytes"
                        else real_find_spec(name, *a))
    served = plan(tiny_model, load_in_8bit=True)
    assert served.engine == "transformers" and served.command[-2:] == ["--quantization", "bnb-8bit"]
    with pytest.raises(ConfigError, match="vLLM quantizes on the fly in 4 bits only"):
        plan(tiny_model, engine="vllm", load_in_8bit=True)


@pytest.mark.slow
def test_a_server_started_by_running_keeps_answering_past_a_pipes_worth_of_log(tiny_model: str) -> None:
    """The agent demos' evaluations serve one model for a whole question set: the server's ~70 bytes of log per
    request once filled an unread 64 KB pipe after ~900 requests, and the server stalled mid-evaluation."""
    import urllib.request

    from hello_agents_rl.workflows.serve import running

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "1"}], "max_tokens": 1}).encode()
    with running(tiny_model) as base_url:
        for _ in range(1200):
            request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as reply:
                assert reply.status == 200


def test_a_reply_whose_tool_call_max_tokens_cut_short_is_answered_as_its_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' parser raises on a tool call's JSON cut off by max_tokens (a 500 that ends an agent's run);
    the served replacement answers the text instead, called as transformers calls it (keywords after input_ids)."""
    from transformers.cli.serving import chat_completion

    from hello_agents_rl.workflows.transformers_serve import answer_cut_tool_calls_as_text

    def parser(processor: object, model: object, generated_ids: object, input_ids: object,
               cleaned_content: str = "", **rest: object) -> tuple[str, None, None]:
        if cleaned_content.startswith("<tool_call>"):
            raise ValueError("unterminated JSON")
        return cleaned_content.upper(), None, None

    monkeypatch.setattr(chat_completion, "parse_assistant_message", parser)
    answer_cut_tool_calls_as_text()
    served = chat_completion.parse_assistant_message
    cut = '<tool_call>{"name": "lookup", "argu'
    assert served(None, None, [1], input_ids=[2], cleaned_content=cut) == (cut, None, None)
    assert served(None, None, [1], input_ids=[2], cleaned_content="fine") == ("FINE", None, None)  # parsed as before


SERVES_THEN_WAITS = """
import sys, time
from hello_agents_rl.workflows.serve import running
with running(sys.argv[1]) as base_url:
    print(base_url, flush=True)
    time.sleep(300)  # a demo scoring its agents, stopped here
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_process_stopped_while_it_serves_leaves_no_server_behind(tiny_model: str) -> None:
    """SIGTERM kills a Python process without running its `finally`: the server `running` started must end with it,
    and free its port."""
    import signal
    from urllib.parse import urlparse

    parent = subprocess.Popen([sys.executable, "-c", SERVES_THEN_WAITS, tiny_model], stdout=subprocess.PIPE, text=True)
    port = urlparse(parent.stdout.readline().strip()).port
    assert port
    parent.send_signal(signal.SIGTERM)
    parent.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return  # nothing listens: the server ended with its parent
        time.sleep(0.5)
    pytest.fail(f"the server on port {port} outlived the process that started it")


@pytest.mark.slow
def test_every_endpoint_answers_the_clients_model_name(tiny_model: str) -> None:
    """A reader's client names its model "m" (HelloAgentsLLM(model="m", ...)); the one model served answers it on
    responses as on chat completions (responses said 400, "Server is pinned to ...")."""
    import urllib.request

    from hello_agents_rl.workflows.serve import running

    requests = {"chat/completions": {"messages": [{"role": "user", "content": "1"}], "max_tokens": 2},
                "responses": {"input": "1", "max_output_tokens": 2}}
    with running(tiny_model) as base_url:
        for endpoint, body in requests.items():
            request = urllib.request.Request(f"{base_url}/{endpoint}", json.dumps({"model": "m", **body}).encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as reply:
                assert reply.status == 200, endpoint
