"""Checkpoint channel-mode benchmark: full vs delta storage, writes and read latency.

Run ``python -m bench.checkpoints`` (see bench/README.md).
"""
