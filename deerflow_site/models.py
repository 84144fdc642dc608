"""API keys: the identity of every REST and WebSocket client."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models

KEY_PREFIX = "dfk_"


def hash_api_key(raw_key: str) -> str:
    """Return the stored digest of a key; keys are random, so a plain SHA-256 suffices."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


def generate_api_key() -> str:
    """Return a new random key in its printable form."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


class ApiKey(models.Model):
    """A secret that authenticates one user; only its SHA-256 digest is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    # The first characters, so support staff can tell keys apart without the secret.
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
