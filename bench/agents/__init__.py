"""Streaming agents under load: N concurrent runs whose fake model streams stamped tokens, ours and ``langgraph dev``.

Run ``python -m bench.agents`` (see bench/README.md); it never runs in ``make test``.
"""
