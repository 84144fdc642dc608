"""Django set up in this process on a throwaway SQLite database: the in-process benchmarks' start."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_sqlite_django(prefix: str) -> Path:
    """Point the settings at a new SQLite folder (no bootstrap admin), set Django up, migrate; return the folder."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.pop("DATABASE_URL", None)
    config = workdir / "config.yaml"
    config.write_text(f"database: {{backend: sqlite, sqlite_dir: {workdir}/data}}\nauth: {{bootstrap_admin: false}}\n")
    os.environ["DEERFLOW_CONFIG"] = str(config)
    os.environ["DEERFLOW_VAR_DIR"] = str(workdir / "var")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return workdir
