"""No Django models: LangGraph's savers and Store own their tables.

The module exists so Django sends this app ``post_migrate``, which is where
the savers' own ``setup()`` creates and upgrades those tables.
"""
