"""`mcp --http` beyond loopback: refused without --allow-remote and a bearer token; with them, every request checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from hello_agents_rl import ConfigError
from hello_agents_rl.interfaces.mcp_http import TOKEN_ENV, http_access
from hello_agents_rl.interfaces.mcp_server import serve

TOKEN = "t" * 40
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def test_a_non_loopback_host_is_refused_before_anything_listens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match="`--host`: 0.0.0.0 is not a loopback address.*--allow-remote"):
        serve([str(tmp_path)], http=True, host="0.0.0.0")
    with pytest.raises(ConfigError, match=f"`--allow-remote`: needs a bearer token in \\${TOKEN_ENV}"):
        serve([str(tmp_path)], http=True, host="192.0.2.7", allow_remote=True)
    monkeypatch.setenv(TOKEN_ENV, "short")
    with pytest.raises(ConfigError, match="has 5 characters; use at least 32"):
        http_access("192.0.2.7", allow_remote=True)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with pytest.raises(ConfigError, match="`--allowed-host`"):  # 0.0.0.0 is no name a client sends as Host
        http_access("0.0.0.0", allow_remote=True)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by other users; chmod 600"):
        http_access("192.0.2.7", allow_remote=True, token_file=str(token_file))
    token_file.chmod(0o600)
    assert http_access("0.0.0.0", allow_remote=True, token_file=str(token_file), allowed_hosts=["gpu-box"]).token == TOKEN


def test_the_cli_refuses_0_0_0_0_without_allow_remote(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "mcp", "--http", "--host", "0.0.0.0",
                           "--root", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != TOKEN_ENV})
    assert done.returncode != 0 and "`--host`: 0.0.0.0 is not a loopback address" in done.stderr + done.stdout


def _post(port: int, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps(INITIALIZE).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_remote_mode_checks_the_bearer_token_and_the_host_on_every_request(tmp_path: Path, http_mcp_server: Any) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    # remote mode forced on over loopback: the same checks as on a public address, without binding one
    with http_mcp_server(tmp_path, "--allow-remote", "--host", "127.0.0.1", env={**os.environ, TOKEN_ENV: TOKEN}) as port:
        assert _post(port, {}) == 401
        assert _post(port, {"Authorization": "Bearer " + "x" * 40}) == 401
        assert _post(port, {"Authorization": TOKEN}) == 401  # no Bearer scheme
        assert _post(port, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example:80"}) == 421  # Host check kept
        assert _post(port, {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}) == 403
        assert _post(port, {"Authorization": f"Bearer {TOKEN}"}) == 200

        async def calls() -> list[str]:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client, \
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return [tool.name for tool in (await session.list_tools()).tools]

        assert "train" in anyio.run(calls)
