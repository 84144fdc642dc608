"""JSON columns sealed with langgraph.json's ``encryption.path`` JSON handlers (``core.custom_encryption``)."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.expressions import Col

from core.custom_encryption import nothing_sealed_in, open_json, open_text, seal_json, seal_text


class _Sealed:
    """``sealed_as`` (the handlers' model and field), kept out of migrations: sealing is behaviour, not schema."""

    stored_as = ""  # the Django field a migration sees

    def __init__(self, *args: Any, sealed_as: tuple[str, str] = ("", ""), **kwargs: Any) -> None:
        # ("", ""): a migration's copy of the field, which does not seal.
        self.sealed_as = sealed_as
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()  # type: ignore[misc]
        return name, self.stored_as, args, kwargs


class EncryptedJSONField(_Sealed, models.JSONField):
    """A JSON column sealed with the project's JSON handlers on save and opened on load.

    Only saves seal (``get_db_prep_save``): a lookup's value (``metadata__owner``,
    ``jsoncontains``) is compared with what is stored as it is, so filters
    work on the keys the handler leaves plaintext. Only whole-column reads
    open: a key read in SQL (``values_list("metadata__key")``) is what is
    stored under the key.
    """

    stored_as = "django.db.models.JSONField"

    def sealed(self, value: Any) -> Any:
        """``value`` as a raw insert must store it (``get_db_prep_save`` is Django's own way there)."""
        return seal_json(*self.sealed_as, value)

    def get_db_prep_save(self, value, connection):
        if value is not None and self.sealed_as[0] and not hasattr(value, "resolve_expression"):
            value = seal_json(*self.sealed_as, value)
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value, expression, connection):
        stored = value
        value = super().from_db_value(value, expression, connection)
        if self.sealed_as[0] and isinstance(expression, Col) and not nothing_sealed_in(stored):
            value = open_json(*self.sealed_as, value)
        return value


class EncryptedTextField(_Sealed, models.TextField):
    """A text column sealed with the project's JSON handlers (as ``{field: text}``) on save, opened on load.

    Its sealed form is ``SEALED_TEXT`` and JSON: a lookup on the column
    matches only text stored in the clear.
    """

    stored_as = "django.db.models.TextField"

    def get_db_prep_save(self, value, connection):
        if isinstance(value, str) and self.sealed_as[0]:
            value = seal_text(*self.sealed_as, value)
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value, expression, connection):
        if isinstance(value, str) and self.sealed_as[0] and isinstance(expression, Col):
            return open_text(*self.sealed_as, value)
        return value
