"""Import a Python file by its path: the graph files and the custom auth file of langgraph.json."""

from __future__ import annotations

import importlib.util
import sys
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
