"""Resume from an older checkpoint without ever resurrecting an abandoned answer.

When ``messages`` is stored full, a run that starts at a non-head checkpoint
forks normally: its checkpoints hold complete values. When it is a
``DeltaChannel`` (delta mode, or a graph that compiles its own, as deepagents'
agents do, in either mode) LangGraph's history walk collects every pending
write stored on each ancestor, including those of the abandoned sibling
branch, so a fork would replay the replaced answer into the new one. Instead
the selected state is written over the head with the mutation graph (a
linear rewrite), and the run continues from the new head.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from checkpoints.accessor import StateAccessor
from checkpoints.rollback import replacement

RESUME_NODE = "checkpoint_resume"


class ResumeStateError(RuntimeError):
    """The selected checkpoint cannot be materialized; never fall back to a fork."""


async def alinearize(accessor: StateAccessor, thread_id: str, checkpoint_id: str) -> RunnableConfig | None:
    """Rewrite the head to equal ``checkpoint_id``'s state; return the new head config.

    Returns None when nothing is to be done: the graph stores ``messages``
    full (forks are safe), or the selected checkpoint already is the head.
    """
    if accessor.storage_mode != "delta":
        return None
    head = await accessor.aget(thread_id)
    if head.config["configurable"].get("checkpoint_id") == checkpoint_id:
        return None
    try:
        selected = await accessor.aget(thread_id, checkpoint_id=checkpoint_id)
    except Exception as exc:
        raise ResumeStateError(f"Checkpoint {checkpoint_id} cannot be materialized for resume: {exc}") from exc
    if "messages" in accessor.writable_channels() and not isinstance((selected.values or {}).get("messages"), list):
        raise ResumeStateError(f"Checkpoint {checkpoint_id} has no materializable message list")
    values = replacement(accessor, dict(selected.values or {}), dict(head.values or {}))
    return await accessor.aupdate(thread_id, values, as_node=RESUME_NODE)
