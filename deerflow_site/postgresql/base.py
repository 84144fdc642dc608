"""Django's PostgreSQL backend, its connection pool checked at checkout by ``core.db.check_pooled``.

Django builds the ORM's psycopg pool itself and passes it psycopg_pool's
``check_connection`` when ``CONN_HEALTH_CHECKS`` is on (one empty query per
checkout, and the ORM checks out a connection per request and per run
step), or no check at all when it is off (a connection the server closed is
then handed to a request to fail). It takes no other check: this backend
gives its pool ours, which polls the socket and pays the round trip only
for a connection heard from while idle.
"""

from __future__ import annotations

from django.db.backends.postgresql import base

from core.db import check_pooled


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool = super().pool
        # psycopg_pool keeps the check it was built with here (psycopg-pool 3.3, pinned); Django offers no way to pass one.
        if pool is not None and pool._check is not check_pooled:
            pool._check = check_pooled
        return pool
