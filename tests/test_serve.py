"""`hello-agents-rl serve`: a trained model behind transformers' own OpenAI-compatible server, asked with `openai`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from conftest import Venv

from hello_agents_rl import ConfigError
from hello_agents_rl.workflows.serve import model_folder, plan
from hello_agents.tools import RLTrainingTool


@pytest.fixture(scope="module")
def lora_run(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder holding only its LoRA adapter (merge_lora: false), with weights that change the answers."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    run = tmp_path_factory.mktemp("served") / "run"
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(run / "adapter")
    return run


def test_what_gets_served(tiny_model: str, lora_run: Path, tmp_path: Path) -> None:
    assert model_folder(tiny_model)[0] == str(Path(tiny_model).resolve())
    folder, notes = model_folder(str(lora_run))  # a run's output_dir -> its adapter -> merged by export
    assert folder == str((lora_run / "adapter-merged").resolve()) and "merged" in notes[0]
    assert (Path(folder) / "config.json").is_file() and (Path(folder) / "tokenizer_config.json").is_file()
    assert "earlier merge" in model_folder(str(lora_run / "adapter"))[1][0]  # not merged twice
    served = plan(str(lora_run), port=8123, engine="transformers")
    assert served.command[1:3] == ["serve", folder] and "8123" in served.command
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
        assert reply.choices[0].message.content == detail["completion"], detail["question"]


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
    """hello-agents 1.0.0 from the registry, in its own environment, pointed at the server: evaluate's answers."""
    venv = fresh_venv()
    venv.pip("install", "hello-agents==1.0.0")
    questions = [d["question"] for d in served["details"]]
    out = venv.run("-c", AGENT, json.dumps([served["base_url"], served["model"], served["system"], questions]))
    answers = json.loads(out.strip().splitlines()[-1])
    assert answers == [d["completion"] for d in served["details"]]


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
