"""What a newcomer meets first: configuration mistakes and a taken port are one clear line, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]


def manage(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "config.yaml").write_text(f"database:\n  backend: sqlite\n  sqlite_dir: {tmp_path}\n{config}")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["DEERFLOW_CONFIG"] = str(tmp_path / "config.yaml")
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("cros:\n  allow_origins: ['http://127.0.0.1:3000']\n", "unknown key cros (did you mean cors?)"),
        ("langgraph_json: missing/langgraph.json\n", "missing/langgraph.json does not exist"),
        ("runs:\n  capacity: 0\n", "runs.capacity: Input should be greater than or equal to 1"),
    ],
)
def test_a_configuration_mistake_is_one_line_naming_it(tmp_path, config, said):
    done = manage(tmp_path, config, "check")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("Configuration error: ") and said in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_is_named_with_how_to_choose_another(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = manage(tmp_path, "", "serve", "--port", str(port))
    assert done.returncode != 0
    assert f"Port {port} on 127.0.0.1 is taken" in done.stderr
    assert f"PORT={port + 1} make run" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.django_db
def test_the_root_page_links_the_api_docs_the_console_and_health(client):
    page = client.get("/")
    assert page.status_code == 200
    body = page.content.decode()
    for link in ('href="/api/docs"', 'href="/admin/"', 'href="/api/ok"'):
        assert link in body
    assert "<code>lead_agent</code>" in body


def test_the_start_up_banner_says_what_is_served_and_names_a_database_without_its_password():
    from deerflow_site.banner import database_identity, startup_banner
    from deerflow_site.databases import parse_postgres_url

    named = database_identity(parse_postgres_url("postgresql://deer:s3cret-pw@db.internal:6543/flow"))
    assert named == "PostgreSQL db.internal:6543/flow"
    banner = "\n".join(startup_banner())
    assert "database    SQLite " in banner
    assert "checkpoints full mode, snapshot every 10" in banner
    assert "graphs      lead_agent" in banner
    assert "cors        off" in banner
