"""Live fixtures shared by the tests that drive real server processes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, npm_ci_once, scaled_config

JS_DIR = Path(__file__).parent / "js"


@pytest.fixture(scope="module")
def js_sdks() -> Path:
    """``tests/live/js`` with its pinned packages installed: the JS SDK, and 1.0.0 as the Agent Chat UI's range allows."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("needs Node.js and npm")
    npm_ci_once(JS_DIR, "langgraph-sdk-v1-0")  # the newest entry of package.json: its presence means all are there
    return JS_DIR


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two server processes sharing one fresh PostgreSQL database and Redis."""
    if not DATABASE_URL or not REDIS_URL:
        pytest.skip("needs PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
    with fresh_postgres_database(DATABASE_URL) as url:
        a = LiveServer(tmp_path_factory.mktemp("a"), config=scaled_config(), database_url=url).setup().start()
        b = LiveServer(tmp_path_factory.mktemp("b"), config=scaled_config(), database_url=url).start()
        b.keys = a.keys  # one database, one set of users and keys
        try:
            yield a, b
        finally:
            a.stop()
            b.stop()
