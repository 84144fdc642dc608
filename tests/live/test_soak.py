"""The fault soak (``bench.soak``) at CI size: every invariant holds while every kind of fault is injected.

Two servers, a run worker, PostgreSQL behind a proxy and a redis-server the
soak starts itself (it restarts it, so never the shared one; a machine
without ``redis-server`` fails here rather than skipping). The assertions
beyond "no violation" make sure the soak did what it says: each fault kind
injected, each request kind answered at least once, each invariant checked
on something.
"""

from __future__ import annotations

import pytest

from bench.soak import soak
from bench.soak.__main__ import report
from bench.soak.cluster import FAULT_KINDS
from bench.soak.traffic import MIX
from tests.live.support import DATABASE_URL

pytestmark = [pytest.mark.live, pytest.mark.postgres_only]


def test_mixed_traffic_under_faults_keeps_every_invariant(tmp_path):
    result = soak(base_url=DATABASE_URL, seconds=20, clients=4, crons=2, seed=14, workdir=tmp_path)
    table = report(result)
    assert result.violations == [], table
    assert {f.kind for f in result.faults} >= set(FAULT_KINDS), table
    answered = {kind for (kind, outcome), n in result.ledger.outcomes.items() if outcome == "ok" and n}
    assert answered >= {*MIX, "create_cron"}, table
    assert all(check.checked for check in result.checks), table
    assert "success" in result.run_statuses, table
