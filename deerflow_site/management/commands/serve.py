import errno
import socket

from django.core.management.base import BaseCommand, CommandError

# Seconds open requests (streams, /wait) get to finish after SIGTERM before
# they are cancelled; the runtime (runs, bridge, savers) is closed after them.
GRACEFUL_SHUTDOWN_SECONDS = 5


class Command(BaseCommand):
    help = (
        "Serve the API, the admin and the WebSocket streams: uvicorn on uvloop and httptools, "
        "the runtime started by ASGI lifespan, until SIGTERM/SIGINT."
    )
    # The runtime's start-up names broken graphs itself; the checks would import them twice.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host: str, port: int, **options):
        # Imported when serving only: every manage.py command imports this module, and uvicorn is heavy.
        from deerflow_site.banner import startup_banner
        from deerflow_site.graceful_stop import serve
        from deerflow_site.http_protocol import LimitedHttpToolsProtocol
        from deerflow_site.server_logs import server_log_config

        _refuse_a_taken_port(host, port)
        _migrate_or_refuse(self.stdout)
        self.stdout.write("\n".join(startup_banner()))

        # Measured against daphne on the same app (README, Performance): 12-28 %
        # less time per request and 14 % less CPU per run.
        # uvicorn.run, ending the requests still open quietly at a stop (graceful_stop).
        serve(
            "deerflow_site.asgi:application",
            host=host,
            port=port,
            loop="uvloop",
            # httptools, with the request head's limits answered as JSON 414/431.
            http=LimitedHttpToolsProtocol,
            ws="websockets-sansio",
            # A start-up that fails stops the process instead of serving errors.
            lifespan="on",
            # A refused request's access line ends with the detail the client got.
            log_config=server_log_config(),
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        )


def _refuse_a_taken_port(host: str, port: int) -> None:
    """Say which port is taken and how to pick another, before the runtime starts (uvicorn's errno line does not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise CommandError(
                f"Port {port} on {host} is taken (another server is running there?). "
                f"Serve on another one: PORT={port + 1} make run, or manage.py serve --port {port + 1}"
            ) from None


def _migrate_or_refuse(stdout) -> None:
    """Bring the schema up to date before serving (``database.auto_migrate``), or refuse in one line."""
    # Imported when serving only, as in handle().
    from django.conf import settings
    from django.db import DatabaseError

    from deerflow_site.lifecycle import SchemaOutdated, schema_migrate_at_start
    from deerflow_site.management.commands.bootstrap import manage_py

    try:
        applied = schema_migrate_at_start(
            auto_migrate=settings.DEERFLOW_CONFIG.database.auto_migrate, command=manage_py()
        )
    except SchemaOutdated as exc:
        raise CommandError(str(exc)) from None
    except DatabaseError:
        # A database that cannot be read at all is named by the runtime's start, as before.
        return
    if applied:
        stdout.write(f"Applied {applied} migrations before serving.")
