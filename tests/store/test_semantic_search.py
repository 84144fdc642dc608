"""Semantic Store search (langgraph.json ``store.index``) on the pass's backend, over HTTP and from graphs.

The index is tests/fixtures/semantic_store's: a deterministic word-bucket
embedding (no model), ``fields: ["text", "tags[*]"]``. On SQLite the vectors
are scored by sqlite-vec or, where the interpreter cannot load extensions,
by our ``vec_distance_cosine``; on PostgreSQL by pgvector where the database
has it, else by ``store_cosine_distance`` (``checkpoints.store_index``).
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection

from checkpoints.runtime import (
    aclose_async_resources,
    async_resources,
    close_sync_resources,
    setup_tables,
    store_vector_table_lacking,
)
from checkpoints.store_index import StoreIndex, sqlite_cosine_distance
from deerflow_site.graph_sources import resolve_graph_sources
from store.selectors import store_namespace_full, store_user_id
from tests.fixtures.semantic_store import embed as fixture_embed
from tests.store.test_store_routes import put, search

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "semantic_store"


def sources_of(index: dict, tmp_path: Path):
    """Resolve a langgraph.json whose store.index is ``index`` (next to the fixture's embed.py)."""
    (tmp_path / "embed.py").write_text((FIXTURE / "embed.py").read_text())
    (tmp_path / "langgraph.json").write_text(json.dumps({"graphs": {}, "store": {"index": index}}))
    return resolve_graph_sources(
        graphs={}, dependencies=[], langgraph_json="langgraph.json", base=tmp_path, source=tmp_path / "config.yaml"
    )


def use_index(settings, index: StoreIndex | None) -> None:
    settings.DEERFLOW = {**settings.DEERFLOW, "STORE_INDEX": index}
    close_sync_resources()
    setup_tables()


@pytest.fixture
def semantic(settings):
    """The fixture project's index on this process's Stores (rebuilt around the test)."""
    sources = resolve_graph_sources(
        graphs={}, dependencies=[], langgraph_json="langgraph.json", base=FIXTURE, source=FIXTURE / "config.yaml"
    )
    use_index(settings, sources.store_index)
    yield sources.store_index
    close_sync_resources()


def label() -> str:
    return f"mem-{uuid.uuid4().hex[:10]}"


def vector_rows(persona, namespace) -> int:
    prefix = ".".join(store_namespace_full(user_id=store_user_id(user=persona.user), namespace=namespace))
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM store_vectors WHERE prefix = %s", [prefix])
        return cursor.fetchone()[0]


def test_the_fixture_project_loads_its_index_at_start_up(semantic):
    assert semantic.dims == 64 and semantic.fields == ["text", "tags[*]"]
    assert semantic.embed == "./embed.py:embed"
    # Unit vectors, checked against dims: what every backend stores.
    (vector,) = semantic.checked_embeddings().embed_documents(["cats and dogs"])
    assert len(vector) == 64 and math.isclose(math.fsum(x * x for x in vector), 1.0)


def test_a_query_ranks_items_by_similarity_and_carries_the_score(owner, semantic):
    ns = [label()]
    put(owner, ns, "cats", {"text": "cats purr and cats sleep"})
    put(owner, ns, "mixed", {"text": "cats chase dogs in the garden"})
    put(owner, ns, "tax", {"text": "quarterly tax filing deadline"})
    items = search(owner, ns, query="sleepy cats purr")
    assert [i["key"] for i in items][:2] == ["cats", "mixed"]
    scores = [i["score"] for i in items]
    assert scores == sorted(scores, reverse=True)
    assert all(isinstance(s, float) and -1.0 <= s <= 1.0 + 1e-6 for s in scores)
    assert scores[0] > scores[-1]
    # The score is the cosine of the two embeddings (the fixture's function, recomputed here).
    expected = cosine(fixture_embed.vector("sleepy cats purr"), fixture_embed.vector("cats purr and cats sleep"))
    assert math.isclose(scores[0], expected, abs_tol=1e-4)
    # Without a query: every item, unscored (newest update first; SQLite's stamps are whole seconds).
    plain = search(owner, ns)
    assert {i["key"] for i in plain} == {"tax", "mixed", "cats"} and {i["score"] for i in plain} == {None}


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_filters_namespace_prefixes_limit_and_offset_apply_to_a_query(owner, semantic):
    root = label()
    put(owner, [root, "pets"], "a", {"text": "cats purr", "kind": "pet"})
    put(owner, [root, "pets"], "b", {"text": "cats hiss", "kind": "wild"})
    put(owner, [root, "work"], "c", {"text": "cats purr loudly", "kind": "pet"})
    assert [i["key"] for i in search(owner, [root, "pets"], query="cats purr")] == ["a", "b"]
    assert [i["key"] for i in search(owner, [root], query="cats purr", filter={"kind": "pet"})] == ["a", "c"]
    first, second = (
        search(owner, [root], query="cats purr", limit=1),
        search(owner, [root], query="cats purr", offset=1),
    )
    assert [i["key"] for i in first] == ["a"] and [i["key"] for i in second][0] == "c"


def test_fields_and_a_puts_own_index_decide_what_is_embedded(owner, semantic):
    ns = [label()]
    # Only `text` and `tags[*]` are embedded: a word found elsewhere in the value does not match.
    put(owner, ns, "tagged", {"text": "meeting notes", "tags": ["budget", "finance"], "note": "zebra"})
    assert vector_rows(owner, ns) == 3  # text, tags[*].0, tags[*].1
    assert [i["key"] for i in search(owner, ns, query="finance budget")] == ["tagged"]
    # index=false stores the item unembedded: listed, never a query result.
    put(owner, ns, "plain", {"text": "finance budget"}, index=False)
    assert [i["key"] for i in search(owner, ns, query="finance budget")] == ["tagged"]
    assert {i["key"] for i in search(owner, ns)} == {"tagged", "plain"}
    # index=[paths] embeds those paths instead of the configured fields.
    put(owner, ns, "noted", {"text": "unrelated words", "note": "zebra crossing"}, index=["note"])
    assert [i["key"] for i in search(owner, ns, query="zebra")][0] == "noted"


def test_another_users_items_never_answer_a_query(owner, other, semantic):
    ns = [label()]
    put(other, ns, "theirs", {"text": "secret launch codes"})
    put(owner, ns, "mine", {"text": "grocery list"})
    assert [i["key"] for i in search(owner, ns, query="secret launch codes")] == ["mine"]
    assert [i["key"] for i in search(owner, [], query="secret launch codes")] == ["mine"]


def test_deleting_or_replacing_an_item_removes_or_replaces_its_vectors(owner, semantic):
    ns = [label()]
    put(owner, ns, "k", {"text": "cats purr"})
    assert vector_rows(owner, ns) == 1
    put(owner, ns, "k", {"text": "dogs bark"})
    assert vector_rows(owner, ns) == 1
    assert search(owner, ns, query="dogs bark")[0]["score"] > 0.99
    response = owner.client.delete("/api/store/items", {"namespace": ns, "key": "k"}, format="json")
    assert response.status_code == 204
    assert vector_rows(owner, ns) == 0 and search(owner, ns, query="dogs bark") == []


def test_an_embedding_function_that_fails_is_a_503_and_nothing_is_written(owner, settings, tmp_path):
    sources = sources_of({"dims": 64, "embed": "./embed.py:broken"}, tmp_path)
    use_index(settings, sources.store_index)
    try:
        ns = [label()]
        response = owner.client.put(
            "/api/store/items", {"namespace": ns, "key": "k", "value": {"text": "x"}}, format="json"
        )
        assert response.status_code == 503
        assert "store.index.dims is 64" in response.json()["detail"]
        assert owner.client.get("/api/store/items", {"namespace": ns[0], "key": "k"}).json() is None
        response = owner.client.post("/api/store/items/search", {"namespace_prefix": ns, "query": "x"}, format="json")
        assert response.status_code == 503
    finally:
        close_sync_resources()


async def test_graphs_search_through_the_async_store(owner, semantic, closing_savers):
    """What a graph's ``store.aput``/``store.asearch(query=…)`` do: the loop's async Store, indexed the same."""
    await aclose_async_resources()  # the loop's Store is built with the index from here
    store = (await async_resources()).store
    full = store_namespace_full(user_id=store_user_id(user=owner.user), namespace=[label()])
    await store.aput(full, "cats", {"text": "cats purr"})
    await store.aput(full, "tax", {"text": "tax filing"})
    await store.aput(full, "quiet", {"text": "purring cats"}, index=False)
    found = await store.asearch(full, query="purring cats")
    assert [item.key for item in found] == ["cats", "tax"] and found[0].score > found[1].score
    expected = cosine(fixture_embed.vector("purring cats"), fixture_embed.vector("cats purr"))
    assert math.isclose(found[0].score, expected, abs_tol=1e-5)  # PostgreSQL exact: float32 vectors


def test_reindex_store_reembeds_after_fields_change(owner, semantic, settings, tmp_path, capsys):
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM store")  # the command's counts are the whole Store's (vectors cascade)
    ns = [label()]
    put(owner, ns, "k", {"text": "alpha", "title": "zebra"})
    put(owner, ns, "unindexed", {"text": "zebra", "title": "zebra crossing"}, index=False)

    def scores() -> dict[str, float]:
        return {i["key"]: round(i["score"], 3) for i in search(owner, ns, query="zebra")}

    assert scores() == {"k": 0.0}  # "alpha" shares no word with the query
    sources = sources_of({"dims": 64, "embed": "./embed.py:embed", "fields": ["title"]}, tmp_path)
    use_index(settings, sources.store_index)
    try:
        call_command("reindex_store", "--dry-run")
        assert "would embed 1 of" in capsys.readouterr().out
        assert scores() == {"k": 0.0}
        call_command("reindex_store")
        assert "re-embedded 1 of" in capsys.readouterr().out
        assert scores() == {"k": 1.0}  # its title now
        # Items stored with index=false stay unembedded unless --all says otherwise.
        call_command("reindex_store", "--all")
        assert scores()["unindexed"] > 0.5 and vector_rows(owner, ns) == 2
    finally:
        close_sync_resources()


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ({"dims": "64", "embed": "./embed.py:embed"}, "store.index.dims must be a positive integer"),
        ({"dims": 64}, "store.index.embed must be"),
        ({"dims": 64, "embed": "./embed.py:embed", "fields": []}, "store.index.fields must be a non-empty list"),
        ({"dims": 64, "embed": "./embed.py:embed", "distance": "l2"}, "unknown keys distance"),
        ({"dims": 64, "embed": "./missing.py:embed"}, "missing.py does not exist"),
        ({"dims": 64, "embed": "./embed.py:nothing"}, "the module has no 'nothing'"),
        ({"dims": 64, "embed": "openai:text-embedding-3-small"}, "needs the `langchain` package"),
    ],
)
def test_a_bad_store_index_stops_start_up_with_one_line(index, message, tmp_path):
    with pytest.raises(ImproperlyConfigured) as raised:
        sources_of(index, tmp_path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_our_sqlite_cosine_matches_the_formula():
    from array import array

    distance = sqlite_cosine_distance()
    a, b, c = array("f", [1.0, 2.0, 0.0]), array("f", [2.0, 1.0, 1.0]), array("f", [0.0, 0.0, 3.0])
    for stored, query in ((a, b), (c, b), (a, c), (b, b)):  # the query changes between calls too
        expected = 1 - cosine(list(stored), list(query))
        assert math.isclose(distance(stored.tobytes(), query.tobytes()), expected, rel_tol=1e-6, abs_tol=1e-7)
    assert distance(None, b.tobytes()) is None
    with pytest.raises(ValueError, match="vectors of 2 and 3 dimensions"):
        distance(array("f", [1.0, 0.0]).tobytes(), b.tobytes())


def test_a_start_on_a_database_without_the_vector_table_creates_it_or_refuses(semantic):
    """An index configured after the database was migrated: serve's schema step creates its table (or refuses)."""
    from deerflow_site.lifecycle import SchemaOutdated, schema_migrate_at_start

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE store_vectors")
        cursor.execute("DROP TABLE vector_migrations")
    close_sync_resources()  # this process's Store had set the table up: build it afresh, as a new server does
    assert store_vector_table_lacking()
    with pytest.raises(SchemaOutdated, match="run `manage.py migrate` before serving"):
        schema_migrate_at_start(auto_migrate=False, command="manage.py")
    assert store_vector_table_lacking()
    assert schema_migrate_at_start(auto_migrate=True, command="manage.py") == 1
    assert not store_vector_table_lacking()
