"""Ours against the reference server (``langgraph dev``) with the same langgraph-sdk workload.

Run ``python -m bench.peers`` (see bench/README.md); it never runs in ``make test``.
"""
