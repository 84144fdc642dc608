"""A2A (agent-to-agent) over JSON-RPC: every assistant at ``/a2a/{assistant_id}``, with its agent card.

``wire``: the protocol's shapes (v1.0, and v0.3 for the slash method names)
and its errors, no I/O. ``tasks``: tasks as runs (``contextId`` is the
thread), read through the caller's scope, streamed from the thread's durable
protocol log. ``views``: the HTTP edge.
"""
