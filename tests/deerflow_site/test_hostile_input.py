"""Targeted hostile input on top of the generated fuzz (tests/live/test_fuzz.py): a 4xx with a detail, nothing written.

Injection-shaped metadata keys, JSON-path and operator filters, odd ``sort_by``
and ``select`` values, invalid UTF-8 and lone surrogates, numbers past any
SQL integer, traversal-shaped ids and non-object bodies, on the routes that
take them. None may be a 5xx, every refusal says why in ``detail`` (or a
protocol-v2 error envelope), and no refused request adds a thread.
"""

from __future__ import annotations

import pytest

from tests.deerflow_site.test_bad_input import new_thread, send
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

CASES = [
    ("POST", "/api/threads", b'\xff\xfe{"metadata": {}}'),
    ("POST", "/api/threads", b'{"metadata": {"a": "\xed\xa0\x80"}}'),
    ("POST", "/api/threads/search", b'{"metadata": {"a\'; DROP TABLE x; --": 1}}'),
    ("POST", "/api/threads/search", b'{"metadata": {"$.a[*]": 1}}'),
    ("POST", "/api/threads/search", b'{"sort_by": "thread_id; DROP", "limit": 5}'),
    ("POST", "/api/threads/search", b'{"select": ["thread_id\\"", "x"]}'),
    ("POST", "/api/threads/search", b'{"limit": 1e308}'),
    ("POST", "/api/threads/search", b'{"limit": 99999999999999999999999}'),
    ("POST", "/api/threads/search", b'{"offset": -1}'),
    ("POST", "/api/threads/search", b'{"extract": {"x": "values..a"}}'),
    ("POST", "/api/threads/search", b'{"extract": {"x": "values[\\"a\\"]"}}'),
    ("POST", "/api/threads/search", b'{"values": {"a": {"$gt": 1}}}'),
    ("POST", "/api/store/items/search", b'{"namespace_prefix": ["a"], "filter": {"$.x": 1}}'),
    ("POST", "/api/store/items/search", b'{"namespace_prefix": ["a"], "filter": {"x": {"$gt": "a"}}}'),
    ("POST", "/api/store/items/search", b'{"namespace_prefix": ["a"], "filter": {"x": {"$eq": [1, {"a": 2}]}}}'),
    ("POST", "/api/store/items/search", b'{"namespace_prefix": ["a"], "limit": 100000000000000000000}'),
    ("POST", "/api/store/namespaces", b'{"prefix": ["../.."], "max_depth": -1}'),
    ("GET", "/api/threads/..%2F..%2Fetc%2Fpasswd", b""),
    ("GET", "/api/threads/%00", b""),
    ("POST", "/api/assistants/search", b'{"metadata": {"a": 1}, "sort_by": "graph_id\\u0000"}'),
    ("POST", "/api/runs/crons/search", b'{"sort_by": "../", "limit": -5}'),
    ("POST", "/api/threads/count", b'{"values": {"a": "\\u0000"}}'),
    ("POST", "/api/threads", b"[1,2,3]"),
    ("POST", "/api/threads", b'"str"'),
    ("POST", "/api/threads", b"null"),
    ("PATCH", "/api/threads/{t}", b'{"metadata": null}'),
    ("POST", "/api/threads/{t}/history", b'{"before": "\\u0000", "limit": 5}'),
    ("POST", "/api/threads/{t}/history", b'{"before": {"configurable": {"checkpoint_id": [1]}}}'),
    ("POST", "/api/threads/{t}/state", b'{"values": {"messages": [{"type": "nope"}]}, "as_node": "agent"}'),
    ("POST", "/api/threads/{t}/commands", b'{"id": 1, "method": "state.listCheckpoints", "params": {"limit": 1e999}}'),
    ("POST", "/api/threads/{t}/commands", b'{"id": 1, "method": "run.start", "params": {"assistant_id": {"a": 1}}}'),
    ("GET", "/api/threads/{t}/runs?limit=1e9&offset=-1", b""),
    ("GET", "/api/threads/{t}/messages/page?limit=abc", b""),
    ("GET", "/api/store/items?namespace=a.b&key=%00", b""),
]


@pytest.mark.parametrize(("method", "url", "raw"), CASES)
def test_targeted_hostile_input_is_refused_with_a_detail_and_writes_nothing(owner, method, url, raw):
    if "{t}" in url:
        url = url.replace("{t}", new_thread(owner))
    before = ThreadMeta.objects.count()
    response = send(owner, method, url, raw)
    assert response.status_code < 500, (response.status_code, response.content[:300])
    if response.status_code >= 400:
        body = response.json()
        assert body.get("detail") or body.get("type") == "error", body
        assert ThreadMeta.objects.count() == before


@pytest.mark.parametrize("path", ["/api/threads/..%2F..%2Fetc%2Fpasswd", "/api/no-such-route", "/api/threads/a/b/c/d"])
def test_a_path_no_route_matches_is_a_json_404_under_the_api(owner, path):
    response = owner.client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"].startswith("No route /api/")


def test_a_path_no_route_matches_outside_the_api_stays_html(client):
    response = client.get("/no-such-page")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
