"""Import what langgraph.json names by path: graph files, its auth, its http.app, its embedding function."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from hashlib import sha1
from pathlib import Path
from typing import Any


def module_from_file(path: Path, name: str) -> Any:
    """Import ``path`` as module ``name``, once per process; a failed import leaves no half-made module behind."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def project_setup(folders: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
    """Put a ``langgraph.json``'s folders on the import path and its env in place (set variables win)."""
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
    for key, value in (env or {}).items():
        os.environ.setdefault(key, value)


def module_of_spec(spec: str, *, prefix: str) -> tuple[Any, str]:
    """Import the module of ``/abs/file.py:attr`` or ``package.module:attr``; return it and ``attr``.

    A file is imported once per process under ``<prefix>_<stem>_<hash of its path>``;
    an import failure propagates for the caller to name in its own words.
    """
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py") or target.startswith("/"):
        path = Path(target)
        return module_from_file(path, f"{prefix}_{path.stem}_{sha1(target.encode()).hexdigest()[:10]}"), attr
    return importlib.import_module(target), attr
