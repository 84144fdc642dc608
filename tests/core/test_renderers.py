"""The orjson renderer writes the bytes DRF's JSONRenderer writes (floats: the same numbers)."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pytest
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import ErrorDetail
from rest_framework.renderers import JSONRenderer

from core.renderers import FastJSONRenderer

UTC = datetime.UTC
SAME_BYTES = {
    "scalars and text": {"a": 1, "b": [True, False, None], "s": 'naïve 漢字 🦜 \u2028 \u2029 "q" \\ \n\t\x01', "n": -5},
    "dates in DRF's form": {
        "aware": datetime.datetime(2026, 12, 2, 14, 0, 0, 123456, tzinfo=UTC),
        "naive": datetime.datetime(2026, 1, 1, 1, 1, 1),
        "offset": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        "date": datetime.date(2026, 1, 2),
        "time": datetime.time(1, 2, 3, 456789),
    },
    "DRF's other types": {
        "uuid": uuid.UUID(int=5),
        "decimal": decimal.Decimal("1.50"),
        "error": ErrorDetail("bad", code="x"),
        "lazy": gettext_lazy("This field is required."),
        "tuple": (1, 2),
        "bytes": b"abc",
    },
    "refused by orjson, rendered by DRF": {"big": 2**70},
    "a non-string key": {1: "a"},
    "a list of objects": [{"x": i, "y": [i] * i} for i in range(4)],
}

FALLBACKS = {"refused by orjson, rendered by DRF", "a non-string key"}


@pytest.mark.backend_free
@pytest.mark.parametrize("name", SAME_BYTES)
def test_the_same_bytes_as_drf(name, monkeypatch):
    data = SAME_BYTES[name]
    expected = JSONRenderer().render(data)
    drf_render, fell_back = JSONRenderer.render, []

    def counted(self, *args, **kwargs):
        fell_back.append(True)
        return drf_render(self, *args, **kwargs)

    monkeypatch.setattr(JSONRenderer, "render", counted)
    assert FastJSONRenderer().render(data) == expected
    assert bool(fell_back) == (name in FALLBACKS)


@pytest.mark.backend_free
def test_floats_are_the_same_numbers_and_nan_is_null():
    floats = [0.1, 1.5, 1e16, 1e-7, 123456789.125, 2.0**60, -0.0, 5e-324]
    assert json.loads(FastJSONRenderer().render(floats)) == json.loads(JSONRenderer().render(floats))
    with pytest.raises(ValueError):
        JSONRenderer().render([float("nan")])  # DRF's strict mode: a 500
    assert FastJSONRenderer().render([float("nan"), float("inf")]) == b"[null,null]"


@pytest.mark.backend_free
def test_indented_output_is_drfs():
    data = {"a": [1, {"b": None}]}
    indented = FastJSONRenderer().render(data, "application/json; indent=2", {"indent": 2})
    assert indented == JSONRenderer().render(data, "application/json; indent=2", {"indent": 2})
    assert b"\n  " in indented


def test_an_api_answer_is_rendered_by_it(owner):
    answer = owner.client.get("/api/info", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    assert isinstance(answer.accepted_renderer, FastJSONRenderer)
    assert answer.content == JSONRenderer().render(answer.data)
