"""`hello-agents-rl serve`: a trained model behind transformers' own OpenAI-compatible server, asked with `openai`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.serve import model_folder, plan
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


@pytest.mark.slow
def test_the_served_model_answers_as_evaluate_does(lora_run: Path) -> None:
    from openai import OpenAI

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen([sys.executable, "-m", "hello_agents_rl.cli", "serve", str(lora_run), "--port", str(port),
                               "--engine", "transformers"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        evaluation = RLTrainingTool().run({"action": "evaluate", "model_path": str(lora_run), "dataset": "arithmetic",
                                           "max_samples": 3, "max_new_tokens": 12, "return_details": True})
        deadline = time.monotonic() + 120
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert server.poll() is None, server.stderr.read().decode()
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.5)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-needed")
        model = client.models.list().data[0].id
        system = evaluation.get("prompt", {}).get("system_prompt")  # the system message evaluate used, if any
        for detail in evaluation["details"]:
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": detail["question"]}]
            reply = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=12)
            assert reply.choices[0].message.content == detail["completion"], detail["question"]
        assert any(d["completion"].strip() for d in evaluation["details"])  # real text was compared, not empty strings
    finally:
        server.terminate()
        server.wait(timeout=30)
