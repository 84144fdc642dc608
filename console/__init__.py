"""The support console: the admin's pages over threads, runs, checkpoints and the Store, in one app.

One module per subject (``threads``, ``runs``, ``schedules``, ``checkpoints``,
``retention``, ``settings_page``, ``store``, ``timeline``); the reads of
LangGraph's tables that only the console needs are in ``console.lineage``.
The admin site itself (its page and health-panel registry) is
``core.admin_site``; the API-key admin stays with its model in
``deerflow_site``. The console sits above every app whose data it shows, and
only ``deerflow_site`` may import it.
"""
