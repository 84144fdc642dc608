"""The layer contract, read from the code's own imports (stdlib ``ast``): every arrow points down.

Layers, bottom up: ``core`` (the foundation: no models, imports no app of
ours), ``checkpoints``, ``store`` (the LangGraph Store as clients see it),
``threads``, ``runs``, ``console`` (the support console's pages), and
``deerflow_site`` (settings, URLs, ASGI, lifecycle, auth, commands) on top.
A module-level import may only point to its own app or a lower layer; no two
files may import each other in a circle; an import inside a function needs a
comment saying why (a lazy optional dependency, a start-up order) on its line
or above its block of imports.

What the tree still owes is listed below by name (``KNOWN_UPWARD``,
``KNOWN_UNEXPLAINED``): a new tangle fails the suite, and so does a listed
one that is gone, so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "checkpoints", "store", "threads", "runs", "console", "deerflow_site")

# The one module-level import that still points up, named: DELETE of a thread
# cancels its unfinished runs first, as the Platform does, so the thread route
# calls the run service that cancels (everything else of threads is below runs).
KNOWN_UPWARD = {
    ("threads.api", "runs.services.cancel"),
}

# Imports inside functions without a comment saying why, per module: none
# left (33 imports inside functions, each explained).
KNOWN_UNEXPLAINED: dict[str, int] = {}


def modules() -> dict[str, Path]:
    """Every module of our apps (migrations aside), by dotted name."""
    found = {}
    for app in LAYERS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _owner(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if node.level:
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join([*base, node.module] if node.module else base)
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix for alias in node.names]
    return [owner for name in names if (owner := _owner(name, known)) and owner != module]


class Imports:
    """The import graph of our modules: module-level arrows and imports made inside functions."""

    def __init__(self) -> None:
        self.known = modules()
        self.arrows: dict[str, set[str]] = defaultdict(set)
        self.in_functions: list[tuple[str, int, bool]] = []  # (module, line, explained)
        for module, path in self.known.items():
            self._read(module, path)

    def _read(self, module: str, path: Path) -> None:
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        for scope, node in _imports(tree):
            targets = _targets(node, module, path.name == "__init__.py", self.known)
            if not targets:
                continue
            if scope == "function":
                self.in_functions.append((module, node.lineno, _explained(lines, node.lineno)))
            elif scope == "module":
                self.arrows[module].update(targets)


def _explained(lines: list[str], lineno: int) -> bool:
    """Whether the import on ``lineno`` (1-based) has a comment on its line or above its block of imports."""
    if "#" in lines[lineno - 1]:
        return True
    above = lineno - 2
    while above >= 0 and (not lines[above].strip() or lines[above].strip().startswith(("from ", "import "))):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def _imports(tree: ast.AST):
    """Yield (scope, import node): scope is "module", "function" or "typing" (under ``if TYPE_CHECKING``)."""

    def walk(node: ast.AST, scope: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield scope, child
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, "function")
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from walk(child, "typing")
            else:
                yield from walk(child, scope)

    yield from walk(tree, "module")


@pytest.fixture(scope="module")
def imports() -> Imports:
    return Imports()


def layer(module: str) -> int:
    return LAYERS.index(module.split(".", 1)[0])


def test_the_foundation_imports_no_app_of_ours(imports):
    above = {(m, t) for m, targets in imports.arrows.items() if m.startswith("core") for t in targets}
    assert {(m, t) for m, t in above if not t.startswith("core")} == set()


def test_every_module_level_import_points_to_its_own_layer_or_below(imports):
    upward = {(m, t) for m, targets in imports.arrows.items() for t in targets if layer(t) > layer(m)}
    assert upward - KNOWN_UPWARD == set(), "a new import points up a layer"
    assert KNOWN_UPWARD - upward == set(), "a listed upward import is gone: take it off KNOWN_UPWARD"


def test_no_two_files_import_each_other_in_a_circle(imports):
    assert _circles(imports.arrows) == []


def test_an_import_inside_a_function_says_why(imports):
    unexplained: dict[str, int] = defaultdict(int)
    for module, _line, explained in imports.in_functions:
        if not explained:
            unexplained[module] += 1
    assert dict(unexplained) == KNOWN_UNEXPLAINED


def _circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for start in sorted(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(arrows.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_refusal_of_the_checkpoint_layer_is_a_domain_error_keeping_its_old_base():
    from checkpoints.accessor import UnknownStateFieldsError, UnreadableStateError
    from checkpoints.errors import (
        CheckpointModeMismatchError,
        CheckpointModeReconfigurationError,
        CheckpointNotFoundError,
        UnknownGraphError,
    )
    from checkpoints.retention import CheckpointProtectedError, RetentionConflictError
    from checkpoints.storage import UnsupportedBackendError
    from core.errors import Conflict, Invalid, NotFound, Unavailable

    kinds = {
        CheckpointModeMismatchError: (Conflict, RuntimeError),
        CheckpointModeReconfigurationError: (Unavailable, RuntimeError),
        CheckpointNotFoundError: (NotFound, LookupError),
        UnknownGraphError: (NotFound, LookupError),
        UnknownStateFieldsError: (Invalid, ValueError),
        UnreadableStateError: (Conflict,),
        CheckpointProtectedError: (Conflict, RuntimeError),
        RetentionConflictError: (Conflict, RuntimeError),
        UnsupportedBackendError: (Unavailable, RuntimeError),
    }
    for error, bases in kinds.items():
        assert all(issubclass(error, base) for base in bases), error
    assert UnsupportedBackendError().status == 501
    assert CheckpointModeMismatchError().detail(thread_id="t1").startswith("Thread t1: Thread requires delta mode")
