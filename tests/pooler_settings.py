"""Settings of reliability workers behind a transaction-pooling PgBouncer: ``DATABASE_URL`` is the
pooler; ``PGFLOW_TEST_DIRECT_URL``, when set, is a direct alias for LISTEN."""

import os

import dj_database_url

from tests.ledger_settings import *  # noqa: F403
from tests.ledger_settings import DATABASES, PGFLOW

PGFLOW = {**PGFLOW, "POOLER": "transaction"}
if os.environ.get("PGFLOW_TEST_DIRECT_URL"):
    DATABASES = {**DATABASES, "direct": dj_database_url.parse(os.environ["PGFLOW_TEST_DIRECT_URL"])}
    PGFLOW["LISTEN_DATABASE"] = "direct"
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
