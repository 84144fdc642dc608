"""Bring a DeerFlow deployment's data across: ``manage.py import_deerflow``.

The source (a DeerFlow SQLite file or PostgreSQL database) is read with
plain DB-API and LangGraph's own savers, never through Django's
connections; everything is written through our models, savers and Store
services, keyed on the source's ids so a rerun skips what is there.
"""
