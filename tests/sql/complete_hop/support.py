"""What the tests of the completion's fast path share."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from tests.sql.support import jb, q


def fast_path_takes(
    items: list[dict[str, Any]],
    flow: str | None = None,
    worker: uuid.UUID | None = None,
    support: Sequence[str] = (),
    generation: int | None = None,
    slots: int = 0,
) -> bool:
    """Whether pgflow.complete_hop takes this batch (for a worker on ``flow``'s queue supporting the
    ``support`` steps, with ``slots`` free): asked in a savepoint that is rolled back."""
    with transaction.atomic():
        taken = bool(
            q(
                "select 1 from pgflow.complete_hop(%s::jsonb, %s, %s::uuid, %s::text[], %s::text[],"
                " %s::bigint[], %s)",
                [
                    jb(items),
                    flow,
                    worker,
                    [flow] * len(support),
                    list(support),
                    [generation] * len(support),
                    slots,
                ],
            )
        )
        transaction.set_rollback(True)
    return taken
