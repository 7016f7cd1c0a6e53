"""The database session of django-pgmigrate's lock watcher ends with the watcher.

With ``pgmigrate`` installed, ``migrate`` runs inside ``pglock.prioritize()``, which starts a
periodic thread that looks for sessions blocking the migration (every
``PGMIGRATE_BLOCKING_ACTION_INTERVAL``, one second by default). That thread's queries open a Django
connection of its own (connections are per thread), and nothing closes it: when ``migrate`` ends,
the thread stops, but its connection stays open until the garbage collector happens to free it.
Whenever ``migrate`` outlasts the first check (pgflow's migrations do on a busy machine), the test
runner's ``migrate`` of the test database leaves such a session behind, and the test runner's final
``DROP DATABASE`` then fails with ``database "test_..." is being accessed by other users`` unless
the collector was quicker (the test database stays behind, for the next run to trip on).

``install()`` gives the watcher the behaviour of Django's own threads (``LiveServerThread`` closes
its connections when it ends): its connections are closed when its loop ends, and stopping it waits
for that, so the session is gone when ``migrate`` returns. It changes nothing when pglock is missing
or its watcher is not the timer thread this was written against (then ``prioritize()`` behaves as
pglock ships it).
"""

from __future__ import annotations

import threading
from typing import Any, Final

from django.db import connections

STOP_WAIT_SECONDS: Final = 10.0
"""How long stopping the watcher waits for a check in flight (one short catalog query)."""


def install() -> bool:
    """Replace pglock's watcher thread class with one that closes its connections; True when done
    (now or earlier), False when pglock is missing or its watcher is not the expected timer."""
    try:
        from pglock import core
    except ImportError:
        return False
    current = getattr(core, "_PeriodicTimer", None)
    if not isinstance(current, type) or not issubclass(current, threading.Timer):
        return False
    if getattr(current, "closes_connections", False):
        return True
    core._PeriodicTimer = closing_timer(current)  # type: ignore[misc,assignment]  # pglock reads it per call
    return True


def closing_timer(base: type[threading.Timer]) -> type[threading.Timer]:
    """``base`` (a periodic ``threading.Timer``) whose thread closes its database connections when
    its loop ends, and whose ``cancel()`` returns once that is done."""

    class ClosingTimer(base):  # type: ignore[misc,valid-type]
        closes_connections = True

        def run(self) -> None:
            try:
                super().run()
            finally:
                connections.close_all()  # this thread's connections only

        def cancel(self) -> Any:
            self.finished.set()
            if self.ident is not None and self is not threading.current_thread():
                self.join(STOP_WAIT_SECONDS)
            return super().cancel()  # pglock's: re-raises an error the watcher's check raised

    ClosingTimer.__name__ = ClosingTimer.__qualname__ = f"Closing{base.__name__}"
    ClosingTimer.__module__ = __name__
    return ClosingTimer
