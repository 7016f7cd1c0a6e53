"""The bench's worker settings behind a transaction-pooling PgBouncer (``DATABASE_URL`` is the pooler):
no prepared statements, no server-side cursors, no LISTEN (polling alone)."""

from __future__ import annotations

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES, PGFLOW

PGFLOW = {**PGFLOW, "POOLER": "transaction"}
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
