"""The official JS SDK (@langchain/langgraph-sdk, pinned in tests/live/js) against a real server."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.live


def test_js_sdk_scenario(js_sdks, api_server):
    env = {**os.environ, "DEERFLOW_URL": api_server.url, "DEERFLOW_KEY": api_server.api_key("alice")}
    result = subprocess.run(
        ["node", "sdk_check.mjs"], cwd=js_sdks, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["wait_last"] == "echo: from js"
    assert {"metadata", "values", "messages"} <= set(out["stream_events"])
    # The JS SDK parses run and thread ids out of Content-Location.
    assert out["created"]["thread_id"] == out["thread_id"] and out["created"]["run_id"]
    assert out["join_events"][0] == "metadata" and "messages" in out["join_events"]
    assert len(out["history_ids"]) == 2 and len(out["older_ids"]) == 2
    assert not set(out["history_ids"]) & set(out["older_ids"]), "the before cursor must not overlap"
    assert out["found"] is True
    assert out["cancelled_status"] == "interrupted"
    assert out["deleted"] is True
