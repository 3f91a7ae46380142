"""Shared fixtures: the project's own tiny model, the shared GSM8K copy, and a small SFT'd model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def gsm8k_dir() -> str:
    if not (GSM8K_DIR / "train.jsonl").is_file():
        pytest.skip(f"GSM8K copy not found at {GSM8K_DIR}")
    return str(GSM8K_DIR)


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests never reach a hub; wandb never phones home.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
