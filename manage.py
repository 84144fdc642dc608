#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    # Settings read config.yaml, langgraph.json and the environment: what is
    # wrong there is said in one line, not under a 60-line traceback.
    if os.environ["DJANGO_SETTINGS_MODULE"] == "deerflow_site.settings":
        try:
            import deerflow_site.settings  # noqa: F401
        except ImproperlyConfigured as exc:
            sys.exit(f"Configuration error: {exc}")

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
