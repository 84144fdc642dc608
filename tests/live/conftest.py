"""Live fixtures shared by the tests that drive real server processes."""

from __future__ import annotations

import pytest

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL, REDIS_URL, scaled_config


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
