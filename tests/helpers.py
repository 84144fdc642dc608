"""Test helpers that drive real components (no mocks of our storage)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage

from checkpoints.accessor import state_accessor, thread_config


def run_turns(thread_id: str, texts: list[str], *, assistant_id: str = "lead_agent") -> list[dict[str, Any]]:
    """Run the real demo graph on the thread with the process's sync saver, one turn per text."""
    accessor = state_accessor(assistant_id)
    results = []
    for text in texts:
        config = accessor.config(thread_id)
        results.append(accessor.graph.invoke({"messages": [HumanMessage(content=text)]}, config))
    return results


def raw_checkpoint_count(thread_id: str) -> int:
    """Count the thread's checkpoints through the saver API."""
    accessor = state_accessor("lead_agent")
    return sum(1 for _ in accessor.saver.list(thread_config(thread_id)))
