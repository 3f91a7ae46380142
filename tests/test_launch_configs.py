"""The shipped multi-node and FSDP2 accelerate configs, launched as a user would, on this CPU machine.

Multi-node: two `accelerate launch` processes, one per "machine" (`--machine_rank 0/1`), meeting on loopback
(gloo); together they train one tiny GRPO run. FSDP2: the model is loaded after the training arguments exist,
so transformers sees the distributed setup while loading (its rank-0 loading; ZeRO-3's partitioned init works
the same way). scripts/dist_probe.py records what each rank saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file
from test_distributed import ACCELERATE_CONFIGS, PROBE, ROOT, _free_port, _launch, _metrics, _seen, _steps_logged

MULTI_NODE = ACCELERATE_CONFIGS / "multi_node.yaml"
FSDP2 = ACCELERATE_CONFIGS / "fsdp2.yaml"
STEPS = 2
GRPO = {
    "action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 8, "num_epochs": 1,
    "max_steps": STEPS, "batch_size": 2, "num_generations": 2, "max_new_tokens": 8, "temperature": 1.0,
    "learning_rate": 5e-3, "logging_steps": 1, "save_steps": 100, "warmup_ratio": 0.0, "use_lora": True,
    "lora_rank": 8, "lora_alpha": 16, "report_to": "none",
}


def _machine(rank: int, port: int, args: list[str]) -> subprocess.Popen:
    """One machine's `accelerate launch` of multi_node.yaml: one process here, two in all, on loopback."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(MULTI_NODE),
               "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
               "--num_machines", "2", "--num_processes", "2", "--mixed_precision", "no", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.fixture(scope="module")
def two_machines(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path, Path]:
    work = tmp_path_factory.mktemp("multi_node")
    out, dump, params = work / "run", work / "dump", work / "params.json"
    params.write_text(json.dumps({**GRPO, "model_name": tiny_model, "output_dir": str(out)}))
    port = _free_port()
    machines = [_machine(rank, port, [str(PROBE), str(dump), str(params)]) for rank in (0, 1)]
    outputs = []
    for machine in machines:
        try:
            outputs.append(machine.communicate(timeout=420)[0])
        except subprocess.TimeoutExpired:
            for m in machines:
                os.killpg(m.pid, signal.SIGKILL)
            pytest.fail("a multi-node launch timed out")
    for machine, output in zip(machines, outputs):
        assert machine.returncode == 0, output[-6000:]
    return outputs, out, dump


@pytest.mark.slow
def test_two_machine_launches_train_one_run_together(two_machines: tuple) -> None:
    (first, second), out, dump = two_machines
    setup = [json.loads(s) for s in _seen(dump, 0, "setup")][0]
    assert setup["num_processes"] == 2, "the two launches joined one process group"
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "completed" and results["num_steps"] == STEPS
    for rank in (0, 1):  # every rank returns the run's result, the one results.json holds
        returned = json.loads((dump / f"result-rank{rank}.json").read_text())
        assert returned["average_reward"] == results["average_reward"] and returned["num_steps"] == STEPS
    weights = [load_file(dump / f"weights-rank{rank}.safetensors") for rank in (0, 1)]
    assert weights[0].keys() == weights[1].keys() and all((weights[0][k] == weights[1][k]).all() for k in weights[0])


@pytest.mark.slow
def test_two_machine_launches_write_results_and_metrics_once(two_machines: tuple) -> None:
    (first, second), out, _ = two_machines
    assert _steps_logged(first, STEPS) == list(range(1, STEPS + 1)), "machine 0 prints each step once"
    assert _steps_logged(second, STEPS) == [], "machine 1 prints no progress"
    steps = [m["step"] for m in _metrics(out) if "loss" in m]
    assert steps == list(range(1, STEPS + 1)), "one metrics line per step"
    assert len(list(out.rglob("results.json"))) == 1


@pytest.mark.slow
def test_fsdp2_model_loads_with_the_distributed_setup_in_place(tiny_model: str, tmp_path: Path) -> None:
    """transformers decides at from_pretrained whether FSDP's rank-0 loading (and ZeRO-3's partitioned init)
    applies: the process group and accelerate's FSDP settings must exist by then."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "algorithm": "sft", "model_name": tiny_model, "output_dir": str(tmp_path / "run"), "dataset": "arithmetic",
        "max_samples": 16, "batch_size": 4, "max_steps": 1, "learning_rate": 1e-3, "use_lora": True,
        "logging_steps": 1, "save_steps": 100, "report_to": "none",
    }))
    dump = tmp_path / "dump"
    _launch([str(PROBE), str(dump), "--cli", "train", "--config", str(config)], ROOT, config=FSDP2)
    for rank in (0, 1):
        loads = [json.loads(s) for s in _seen(dump, rank, "load")]
        assert loads == [{"fsdp": True, "zero3": False, "process_group": True}], f"rank {rank} loaded blind: {loads}"
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "completed"
