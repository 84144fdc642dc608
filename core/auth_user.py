"""The user object handlers written for the Platform receive: keys as attributes and items."""

from __future__ import annotations

from typing import Any


class AuthUser:
    """What an identity is (``identity``, ``display_name``, ``is_authenticated``, ``permissions``, and
    whatever else authenticate returned), read as ``user.org_id`` or ``user["org_id"]``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def dict(self) -> dict[str, Any]:
        return dict(self._data)
