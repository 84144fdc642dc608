"""Support-console pages over a thread's checkpoints: lineage, checkpoint + diff, retention, storage.

They live with the thread records because they need them (the thread's
graph, its runs, who else references its checkpoints, the admin log) while
the reads of LangGraph's tables stay in ``checkpoints.console``.
"""
