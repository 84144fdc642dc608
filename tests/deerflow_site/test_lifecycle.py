"""Process start-up: what it built lives as long as the process, out of the cyclic collector's generations."""

from __future__ import annotations

import gc

import pytest

from deerflow_site import lifecycle

pytestmark = pytest.mark.django_db(transaction=True)


def _in_collected_generations(obj) -> bool:
    return any(o is obj for o in gc.get_objects())


async def test_start_up_freezes_what_the_process_built_once(runtime):
    assert gc.get_freeze_count() > 0
    # Built at import, before any start-up: a full collection never walks it again.
    assert not _in_collected_generations(lifecycle.startup)
    built_after = object.__new__(type("BuiltAfterStartUp", (), {}))
    assert _in_collected_generations(built_after)
    await lifecycle.shutdown()
    await lifecycle.startup()
    # Once per process: a later start-up (tests, a runtime restarted) freezes nothing more.
    assert _in_collected_generations(built_after)
