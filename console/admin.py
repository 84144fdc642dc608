"""Register the console: the admin's autodiscovery imports this module once the apps are loaded.

The model admins register themselves (``@admin.register``) as their modules
load, threads before runs as when each app had its own ``admin.py`` (the
admin's app-index URL lists the apps in registration order). The custom pages
and the health panel are registered here, in the order the index and the
settings page list them.
"""

from console import threads  # noqa: F401

# isort: split
from console import audit, checkpoints, health, retention, runs, schedules, settings_page, store  # noqa: F401
from core.admin_site import console_site

for page in (settings_page.PAGE, store.PAGE, health.PAGE, *checkpoints.PAGES, *retention.PAGES):
    console_site().register_page(page)
console_site().register_health_panel(runs.HEALTH_PANEL)
