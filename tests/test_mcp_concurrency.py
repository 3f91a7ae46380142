"""Concurrent in-place calls in one MCP server: each gives the numbers it gives alone (they are queued)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
import mcp_types as types

from hello_agents_rl.interfaces.mcp_server import RLServer


def test_three_concurrent_evaluations_match_the_sequential_ones(tiny_model: str, tmp_path: Path) -> None:
    """The issue's reproduction: three `evaluate` calls at once loaded the model concurrently, which left its
    tied lm_head newly (randomly) initialised in each, so their answers differed from a call made alone."""
    server = RLServer([tmp_path, Path(tiny_model).parent])
    arguments = {"model_path": tiny_model, "dataset": "arithmetic", "max_samples": 4, "max_new_tokens": 8,
                 "return_details": True}
    alone = server.call("evaluate", arguments)
    results: list[types.CallToolResult] = []

    async def together() -> None:
        async def one() -> None:  # the SDK's path: each call in a worker thread
            results.append(await server._call_tool(None, types.CallToolRequestParams(name="evaluate", arguments=arguments)))

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(one)

    anyio.run(together)
    assert len(results) == 3 and not any(result.is_error for result in results), [r.content[0].text for r in results]
    answers = [[row["completion"] for row in result.structured_content["details"]] for result in results]
    assert answers == [[row["completion"] for row in alone["details"]]] * 3
    assert {result.structured_content["accuracy"] for result in results} == {alone["accuracy"]}
