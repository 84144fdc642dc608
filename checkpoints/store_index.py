"""The Store's embedding index (langgraph.json ``store.index``): semantic search on every backend.

``store.index`` is ``{dims, embed, fields}``. ``embed`` names the project's
embedding function (``./file.py:fn`` or ``package.module:fn``; sync or
async, ``list[str] -> list[list[float]]``) or a LangChain ``provider:model``
(``init_embeddings``, which needs ``langchain``, the provider's package and
its key). ``fields`` are the value paths embedded on a put (``$``, the whole
value, by default); a put's own ``index`` (``false`` or paths) overrides them.

Each backend ranks with LangGraph's own Store code where it can:

- **memory**: ``InMemoryStore``'s index;
- **SQLite**: ``SqliteStore``'s ``store_vectors`` (float32 blobs) scored by
  ``vec_distance_cosine``: sqlite-vec's C function where the interpreter can
  load extensions, else ours, registered on the Store's connections (the
  same formula over the same blobs, in Python; its cost is in docs/store.md);
- **PostgreSQL with pgvector** installed in the database: ``PostgresStore``'s
  index as it is;
- **PostgreSQL without it**: ``ExactPostgresStore``, the same tables with
  ``real[]`` vectors scored by one SQL function, ``store_cosine_distance`` (an
  exact scan; its cost is in docs/store.md).

Every vector is checked against ``dims`` and scaled to unit length before it
is stored or compared, so cosine similarity is a dot product everywhere. What
a database holds decides its flavour once set up (a ``real[]`` table stays
exact after pgvector is installed, until ``manage.py reindex_store
--rebuild``), so the processes of one deployment never disagree.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from core.errors import Unavailable

Flavour = Literal["sqlite", "pgvector", "exact"]  # where vectors live and how they are scored

# SQLite's scoring function: sqlite-vec's name, so LangGraph's SqliteStore SQL runs unchanged.
SQLITE_COSINE = "vec_distance_cosine"
# The exact PostgreSQL scoring function (unit vectors: 1 - their dot product).
PG_COSINE = "store_cosine_distance"
# PL/pgSQL's loop over subscripts: ~30 µs a row at 384 dimensions, against ~55 µs for SQL's sum over unnest().
PG_EXACT_FUNCTION_SQL = f"""
CREATE OR REPLACE FUNCTION {PG_COSINE}(a real[], b real[]) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    dot double precision := 0;
BEGIN
    IF cardinality(a) <> cardinality(b) THEN
        RAISE EXCEPTION 'vectors of % and % dimensions (reindex_store --rebuild)', cardinality(a), cardinality(b);
    END IF;
    FOR i IN 1 .. cardinality(a) LOOP
        dot := dot + a[i] * b[i];
    END LOOP;
    RETURN 1 - dot;
END
$$
"""
PG_EXACT_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS store_vectors (
    prefix text NOT NULL,
    key text NOT NULL,
    field_name text NOT NULL,
    embedding real[] NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (prefix, key, field_name),
    FOREIGN KEY (prefix, key) REFERENCES store(prefix, key) ON DELETE CASCADE
)
"""
# LangGraph's PostgresStore scores cosine with pgvector's operator on a cast parameter.
_PGVECTOR_COSINE = "sv.embedding <=> %s::vector"
_EXACT_COSINE = f"{PG_COSINE}(sv.embedding, %s::real[])"
# Which flavour a PostgreSQL database holds: its store_vectors column type, else whether pgvector is installed.
PG_FLAVOUR_SQL = """
SELECT (SELECT udt_name FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = 'store_vectors' AND column_name = 'embedding'),
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
"""


class EmbeddingFailed(Unavailable):
    """The configured embedding function failed or answered the wrong shape (503; nothing was written)."""


@dataclass(frozen=True)
class StoreIndex:
    """``store.index`` as loaded at start-up: dimensions, paths and the embedding function."""

    dims: int
    embed: str  # as written in langgraph.json
    fields: list[str] = field(default_factory=lambda: ["$"])
    embeddings: Embeddings | None = field(default=None, compare=False, repr=False)

    def checked_embeddings(self) -> UnitEmbeddings:
        if self.embeddings is None:
            raise RuntimeError("store.index was parsed without its embedding function")
        return UnitEmbeddings(self.embeddings, dims=self.dims, name=self.embed)

    def config(self) -> dict[str, Any]:
        """The ``index=`` argument of LangGraph's Stores (SQLite reads ``text_fields``, the others ``fields``)."""
        return {
            "dims": self.dims,
            "embed": self.checked_embeddings(),
            "fields": list(self.fields),
            "text_fields": list(self.fields),
        }

    def texts(self, value: dict[str, Any]) -> list[tuple[str, str]]:
        """The ``(field name, text)`` pairs a put of ``value`` embeds, named as LangGraph's Stores name them."""
        found = []
        for path in self.fields:
            texts = get_text_at_path(value, "$" if path == "$" else tokenize_path(path))
            found += [(f"{path}.{i}" if len(texts) > 1 else path, text) for i, text in enumerate(texts)]
        return found


class UnitEmbeddings(Embeddings):
    """The project's embeddings, checked against ``dims`` and scaled to unit length.

    Any failure of the project's function becomes ``EmbeddingFailed`` naming
    it; LangGraph's Stores embed before they write, so nothing is written.
    """

    def __init__(self, inner: Embeddings, *, dims: int, name: str) -> None:
        self.inner, self.dims, self.name = inner, dims, name

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._unit(self._call(self.inner.embed_documents, texts), len(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._unit(self._call(self.inner.embed_documents, [text]), 1)[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        try:
            vectors = await self.inner.aembed_documents(texts)
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._unit(vectors, len(texts))

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]

    def _call(self, fn: Callable[[list[str]], list[list[float]]], texts: list[str]) -> list[list[float]]:
        try:
            return fn(texts)
        except Exception as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: Exception) -> EmbeddingFailed:
        return EmbeddingFailed(f"store.index.embed {self.name} failed: {type(exc).__name__}: {exc}")

    def _unit(self, vectors: Sequence[Sequence[float]], count: int) -> list[list[float]]:
        if len(vectors) != count:
            raise EmbeddingFailed(f"store.index.embed {self.name} answered {len(vectors)} vectors for {count} texts")
        unit = []
        for vector in vectors:
            if len(vector) != self.dims:
                raise EmbeddingFailed(
                    f"store.index.embed {self.name} answered {len(vector)} dimensions; store.index.dims is {self.dims}"
                )
            norm = math.sqrt(math.fsum(x * x for x in vector))
            if not math.isfinite(norm):
                raise EmbeddingFailed(f"store.index.embed {self.name} answered a vector that is not finite")
            unit.append([x / norm for x in vector] if norm else [0.0] * self.dims)
        return unit


def load_embeddings(spec: str, *, load_function: Callable[[str], Any]) -> Embeddings:
    """Return the embeddings ``spec`` names: a function path (loaded by ``load_function``) or ``provider:model``.

    A function path is a file (``./x.py:fn``, ``/abs/x.py:fn``) or a dotted
    module (``pkg.mod:fn``); anything else is a LangChain provider string.
    Raises ``ValueError`` with one line saying what is missing.
    """
    target = spec.rpartition(":")[0]
    if target.endswith(".py") or target.startswith((".", "/")) or "." in target:
        function = load_function(spec)
        if isinstance(function, Embeddings):
            return function
        if not callable(function):
            raise ValueError(f"{spec} names {type(function).__name__}, not an embedding function")
        return ensure_embeddings(function)
    try:
        # Optional: only a provider string needs langchain.
        from langchain.embeddings import init_embeddings  # type: ignore[import-not-found]
    except ImportError:
        raise ValueError(
            f"{spec!r} is a LangChain provider:model, which needs the `langchain` package and the provider's "
            f"(e.g. `langchain-{target}`) installed in this server's environment; or name your own function "
            "(./embed.py:embed)"
        ) from None
    try:
        return init_embeddings(spec)
    except Exception as exc:  # a missing provider package or API key: one line naming it
        raise ValueError(f"{spec!r} cannot be initialised: {type(exc).__name__}: {exc}") from exc


# -- SQLite ---------------------------------------------------------------------------------


def can_load_sqlite_extensions() -> bool:
    """Whether this interpreter's sqlite3 can load sqlite-vec (many builds, pyenv's among them, cannot)."""
    return hasattr(sqlite3.Connection, "enable_load_extension")


def sqlite_cosine_distance() -> Callable[[bytes | None, bytes | None], float | None]:
    """A ``vec_distance_cosine`` for one connection: sqlite-vec's ``1 - cos`` over two float32 blobs.

    SQLite calls it once per stored vector with the same query blob, so the
    query's array and norm are kept from one call to the next (~2 µs a row
    at 384 dimensions against ~37 µs in pure Python).
    """
    # numpy loads only for a Store index scored here (150 ms of every process's start otherwise).
    import numpy as np

    last: list[Any] = [None, None, 0.0]  # the query blob, its array, its norm

    def distance(stored: bytes | None, query: bytes | None) -> float | None:
        if stored is None or query is None:
            return None
        if query != last[0]:
            vector = np.frombuffer(query, dtype=np.float32)
            last[:] = [query, vector, float(np.sqrt(vector @ vector))]
        vector = np.frombuffer(stored, dtype=np.float32)
        if len(vector) != len(last[1]):
            raise ValueError(f"vectors of {len(vector)} and {len(last[1])} dimensions (reindex_store --rebuild)")
        norms = float(np.sqrt(vector @ vector)) * last[2]
        return 1.0 - float(vector @ last[1]) / norms if norms else 1.0

    return distance


def prepare_sqlite(conn: sqlite3.Connection) -> None:
    """Give a Store connection ``vec_distance_cosine`` (sqlite-vec where it loads, else ours) and cascading deletes.

    SQLite enforces ``store_vectors``' foreign key only where the connection
    asks: without it a deleted or expired item would leave its vectors behind.
    """
    conn.execute("PRAGMA foreign_keys=ON")
    if can_load_sqlite_extensions():
        # Loaded only where the interpreter can load extensions.
        import sqlite_vec  # type: ignore[import-untyped]

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    else:
        conn.create_function(SQLITE_COSINE, 2, sqlite_cosine_distance(), deterministic=True)


async def aprepare_sqlite(conn: Any) -> None:
    """``prepare_sqlite`` for an aiosqlite connection."""
    await conn.execute("PRAGMA foreign_keys=ON")
    if can_load_sqlite_extensions():
        # Loaded only where the interpreter can load extensions.
        import sqlite_vec  # type: ignore[import-untyped]

        await conn.enable_load_extension(True)
        await conn.load_extension(sqlite_vec.loadable_path())
        await conn.enable_load_extension(False)
    else:
        await conn.create_function(SQLITE_COSINE, 2, sqlite_cosine_distance(), deterministic=True)


_VECTOR_VERSION_TABLE_SQL = "CREATE TABLE IF NOT EXISTS vector_migrations (v INTEGER PRIMARY KEY)"
_VECTOR_VERSION_SQL = "SELECT max(v) FROM vector_migrations"
_VECTOR_VERSION_INSERT_SQL = "INSERT OR IGNORE INTO vector_migrations (v) VALUES (?)"


@functools.cache
def sqlite_stores() -> tuple[type, type]:
    """LangGraph's sync and async SQLite Stores as this server builds them.

    - Their setup() never loads sqlite-vec itself (it fails on an interpreter
      that cannot load extensions; ``prepare_sqlite`` has given the
      connection its scoring function already); the vector table is created
      as theirs is. Call setup() before an indexed Store is shared: it
      clears ``index_config`` while it creates the item tables.
    - The async Store says it supports TTLs, as it does: in
      langgraph-checkpoint-sqlite 3.1.2 ``AsyncSqliteStore.supports_ttl`` is
      False only because ``BaseStore`` precedes ``BaseSqliteStore`` in its
      bases, so a graph's writes got no default TTL and an explicit one was
      refused (its own ``aput`` applies TTLs all the same).
    """
    from langgraph.store.sqlite import SqliteStore  # the SQLite Stores load only on that backend
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    class IndexedSqliteStore(SqliteStore):
        def setup(self) -> None:
            index_config, self.index_config = self.index_config, None
            try:
                super().setup()  # the item tables: no extension needed
            finally:
                self.index_config = index_config
            if not index_config:
                return
            with self.lock:
                self.conn.execute(_VECTOR_VERSION_TABLE_SQL)
                (done,) = self.conn.execute(_VECTOR_VERSION_SQL).fetchone()
                start = -1 if done is None else done
                for v, sql in enumerate(self.VECTOR_MIGRATIONS[start + 1 :], start=start + 1):
                    self.conn.executescript(sql)
                    self.conn.execute(_VECTOR_VERSION_INSERT_SQL, (v,))

    class IndexedAsyncSqliteStore(AsyncSqliteStore):
        supports_ttl = True

        async def setup(self) -> None:
            index_config, self.index_config = self.index_config, None
            try:
                await super().setup()
            finally:
                self.index_config = index_config
            if not index_config:
                return
            async with self.lock:
                await self.conn.execute(_VECTOR_VERSION_TABLE_SQL)
                async with self.conn.execute(_VECTOR_VERSION_SQL) as cursor:
                    (done,) = await cursor.fetchone() or (None,)
                start = -1 if done is None else done
                for v, sql in enumerate(self.VECTOR_MIGRATIONS[start + 1 :], start=start + 1):
                    await self.conn.executescript(sql)
                    await self.conn.execute(_VECTOR_VERSION_INSERT_SQL, (v,))

    return IndexedSqliteStore, IndexedAsyncSqliteStore


# -- PostgreSQL -----------------------------------------------------------------------------


def postgres_flavour(row: Any) -> Flavour:
    """``pgvector`` or ``exact``, from ``PG_FLAVOUR_SQL``'s row (a tuple or a dict): the table's type wins, then the extension."""
    column, installed = row.values() if isinstance(row, dict) else row
    if column is not None:
        return "exact" if column == "_float4" else "pgvector"
    return "pgvector" if installed else "exact"


def exact_search_queries(queries: list, embedding_requests: list) -> tuple[list, list]:
    """LangGraph's PostgreSQL search queries scored by ``store_cosine_distance`` instead of pgvector's operator."""
    if not embedding_requests:
        return queries, embedding_requests
    exact = [(sql.replace(_PGVECTOR_COSINE, _EXACT_COSINE), params) for sql, params in queries]
    if any(_PGVECTOR_COSINE in sql for sql, _ in exact) or not any(_EXACT_COSINE in sql for sql, _ in exact):
        # LangGraph's SQL changed shape: refuse rather than rank with an operator this database lacks.
        raise RuntimeError("langgraph-checkpoint-postgres's search SQL is not the one ExactPostgresStore adapts")
    return exact, embedding_requests


@functools.cache
def exact_postgres_stores() -> tuple[type, type]:
    """The sync and async ``ExactPostgresStore`` classes (built on first use: psycopg loads only on PostgreSQL)."""
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore
    from langgraph.store.postgres.base import Migration

    migrations = [Migration(PG_EXACT_FUNCTION_SQL), Migration(PG_EXACT_TABLE_SQL)]

    class ExactPostgresStore(PostgresStore):
        """PostgresStore without pgvector: ``real[]`` vectors, an exact scan scored in SQL."""

        VECTOR_MIGRATIONS = migrations

        def _prepare_batch_search_queries(self, search_ops):
            return exact_search_queries(*super()._prepare_batch_search_queries(search_ops))

    class ExactAsyncPostgresStore(AsyncPostgresStore):
        """AsyncPostgresStore without pgvector (see ExactPostgresStore)."""

        VECTOR_MIGRATIONS = migrations

        def _prepare_batch_search_queries(self, search_ops):
            return exact_search_queries(*super()._prepare_batch_search_queries(search_ops))

    return ExactPostgresStore, ExactAsyncPostgresStore


# -- re-embedding ---------------------------------------------------------------------------


@dataclass
class ReindexReport:
    """What ``reindex`` did (or, in a dry run, would do)."""

    flavour: str
    items: int = 0  # items in the Store
    embedded: int = 0  # items whose vectors were (or would be) replaced
    skipped: int = 0  # items without vectors, left so (stored with index=false; --all embeds them)
    texts: int = 0  # texts sent to the embedding function
    rebuilt: bool = False


_ITEMS_SQL = """
SELECT s.prefix, s.key, s.value,
       EXISTS (SELECT 1 FROM store_vectors sv WHERE sv.prefix = s.prefix AND sv.key = s.key)
FROM store s WHERE (s.prefix > %s OR (s.prefix = %s AND s.key > %s))
ORDER BY s.prefix, s.key LIMIT %s
"""
_DELETE_VECTORS_SQL = "DELETE FROM store_vectors WHERE prefix = %s AND key = %s"
_INSERT_VECTOR_SQL = {
    "sqlite": "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES (%s, %s, %s, %s)",
    "pgvector": "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES (%s, %s, %s, %s::vector)",
    "exact": "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES (%s, %s, %s, %s::real[])",
}


def _encoded(flavour: str, vector: list[float]) -> Any:
    # sqlite-vec's float32 blob (sqlite_vec.serialize_float32: native-order float32s); lists elsewhere.
    return array("f", vector).tobytes() if flavour == "sqlite" else vector


def reindex(
    index: StoreIndex,
    connection: Any,
    *,
    flavour: Flavour,
    everything: bool = False,
    dry_run: bool = False,
    batch_size: int = 256,
    progress: Callable[[ReindexReport], None] | None = None,
) -> ReindexReport:
    """Replace every indexed item's vectors with ``index``'s fields and function, batch by batch.

    ``connection`` is Django's (the Store's tables live in its database).
    Items without vectors were stored with ``index=false`` (or had no text at
    the paths): left so unless ``everything``. Each batch is embedded first
    and then written in one transaction, so a failure or a kill leaves every
    item with either its old vectors or its new ones; a rerun finishes.
    """
    from django.db import transaction  # Django's transaction on the caller's connection

    report = ReindexReport(flavour=flavour)
    embeddings = index.checked_embeddings()
    after = ("", "")
    while True:
        with connection.cursor() as cursor:
            cursor.execute(_ITEMS_SQL, [after[0], after[0], after[1], batch_size])
            rows = cursor.fetchall()
        if not rows:
            return report
        after = (rows[-1][0], rows[-1][1])
        chosen = []
        for prefix, key, value, has_vectors in rows:
            report.items += 1
            if not has_vectors and not everything:
                report.skipped += 1
                continue
            texts = index.texts(json.loads(value) if isinstance(value, str | bytes) else value)
            chosen.append((prefix, key, texts))
            report.texts += len(texts)
        report.embedded += len(chosen)
        if not dry_run and chosen:
            vectors = iter(embeddings.embed_documents([text for _, _, texts in chosen for _, text in texts]))
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                for prefix, key, texts in chosen:
                    cursor.execute(_DELETE_VECTORS_SQL, [prefix, key])
                    for name, _ in texts:
                        cursor.execute(
                            _INSERT_VECTOR_SQL[flavour], [prefix, key, name, _encoded(flavour, next(vectors))]
                        )
        if progress:
            progress(report)
