"""langgraph.json ``http.app`` refused in one line when it cannot be served (the live test serves a good one)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from deerflow_site.config import parse_config
from deerflow_site.custom_app import load_app

pytestmark = pytest.mark.backend_free


def sources(tmp_path, http: dict):
    (tmp_path / "langgraph.json").write_text(json.dumps({"graphs": {}, "http": http}))
    return parse_config(
        {"langgraph_json": str(tmp_path / "langgraph.json")}, source=tmp_path / "c.yaml"
    ).graph_sources()


def test_a_missing_app_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(ImproperlyConfigured, match=r"http\.app: .*/nowhere\.py does not exist"):
        sources(tmp_path, {"app": "./nowhere.py:app"})


def test_the_flag_must_be_a_boolean(tmp_path):
    (tmp_path / "app.py").write_text("app = None\n")
    with pytest.raises(ImproperlyConfigured, match="http.enable_custom_route_auth must be true or false"):
        sources(tmp_path, {"app": "./app.py:app", "enable_custom_route_auth": "yes"})


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("async def app(scope, receive, send):\n    pass\n", "names function, not a Starlette or FastAPI app"),
        ("raise ImportError('no fastapi here')\n", "cannot be imported: ImportError: no fastapi here"),
        ("", "names nothing, not a Starlette or FastAPI app"),
    ],
)
def test_an_app_that_cannot_be_served_is_refused_naming_why(tmp_path, source, named):
    path = tmp_path / f"app_{abs(hash(source))}.py"
    path.write_text(source)
    with pytest.raises(ImproperlyConfigured, match=named):
        load_app(f"{path}:app")


def test_a_good_app_is_accepted_with_its_spec_and_flag(tmp_path):
    (tmp_path / "app.py").write_text("from starlette.applications import Starlette\napp = Starlette()\n")
    found = sources(tmp_path, {"app": "./app.py:app", "enable_custom_route_auth": True})
    assert (found.http_app, found.http_app_auth) == (f"{tmp_path / 'app.py'}:app", True)
    assert load_app(found.http_app).routes == []
