"""Slug rules, mirroring SQL ``pgflow.is_valid_slug`` (a parity test keeps them so).

``__`` is reserved for generated queue names (``flow__step``), so no slug may contain it, start or end
with ``_``; queue names are lowercase, so slugs differing only in case are refused where they would
collide (flows, and steps within one flow).

Checking in Python first gives a definition-time error that names the offending flow or step, instead of a
check-constraint violation at compile time.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

MAX_SLUG_LENGTH: Final = 128
MAX_FLOW_SLUG_LENGTH: Final = 47
"""PGMQ refuses queue names longer than this, and a flow's queue is named after its slug."""
RESERVED_SLUGS: Final = frozenset({"run"})
TASK_STEP_SLUG: Final = "call"
"""The one step of the flow that runs a Django task (``pgflow_django.tasks``)."""
TASK_SLUG_DIGEST_CHARS: Final = 8
"""Hex digits of the hash that ends a Django task's flow slug (unique per function and queue)."""
TASK_FLOW_SLUG_REGEX: Final = rf"_[0-9a-f]{{{TASK_SLUG_DIGEST_CHARS}}}(___v[0-9]+)?$"
"""A task flow's stored slug: its hash suffix, then a version suffix for a later version."""

_SLUG_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_BAD_CHAR_RE: Final = re.compile(r"[^A-Za-z0-9_]")
RULE: Final = (
    f"1..{MAX_SLUG_LENGTH} ASCII letters, digits or single underscores, starting with a letter, "
    f"not ending with '_', and not {' or '.join(repr(word) for word in sorted(RESERVED_SLUGS))}"
)


class InvalidSlug(ValueError):
    """A flow or step slug that the database would refuse."""


def _show(value: object) -> str:
    """``repr`` of a slug, shortened so a pasted paragraph still gives a one-line error."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:50]}...{text[-7:]}"


def slug_problem(value: object) -> str | None:
    """Why ``value`` is not a valid slug, or None when it is (the same answer as ``pgflow.is_valid_slug``)."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if len(value) > MAX_SLUG_LENGTH:
        return f"is {len(value)} characters long (at most {MAX_SLUG_LENGTH})"
    bad = _BAD_CHAR_RE.search(value)
    if bad is not None:
        return f"contains {bad.group()!r}"
    if _SLUG_RE.fullmatch(value) is None:
        return "starts with a digit" if value[0].isdigit() else "starts with '_'"
    if value.endswith("_"):
        return "ends with '_'"
    if "__" in value:
        return "contains '__' (reserved for generated queue names)"
    if value.lower() in RESERVED_SLUGS:
        return "is a reserved word"
    return None


def is_valid_slug(value: object) -> bool:
    """True when SQL ``pgflow.is_valid_slug`` accepts ``value``."""
    return slug_problem(value) is None


def validate_slug(value: object, what: str = "slug", fix: str = "rename it") -> str:
    """Return ``value`` when it is a valid slug; else raise ``InvalidSlug`` naming ``what`` and the fix."""
    problem = slug_problem(value)
    if problem is None and isinstance(value, str):
        return value
    raise InvalidSlug(f"{what} {_show(value)} {problem}; {fix} ({RULE})")


def validate_flow_slug(value: object, what: str = "flow slug") -> str:
    """A step slug's rules plus PGMQ's queue-name limit, since the flow's queue carries its slug."""
    slug = validate_slug(value, what)
    if len(slug) > MAX_FLOW_SLUG_LENGTH:
        raise InvalidSlug(
            f"{what} {_show(slug)} is {len(slug)} characters long, but its PGMQ queue name allows at most "
            f"{MAX_FLOW_SLUG_LENGTH}; choose a shorter slug"
        )
    return slug


def default_queue_name(flow_slug: str) -> str:
    """A plain flow's queue: its canonical lowercase slug (PGMQ addresses tables in lowercase)."""
    return flow_slug.lower()


MAX_QUEUE_NAME_LENGTH: Final = 47
"""PGMQ's limit on queue names (its table names add a prefix within PostgreSQL's 63 characters)."""

_QUEUE_NAME_RE: Final = re.compile(r"[a-z0-9_]{1,47}")


def is_valid_queue_name(value: object) -> bool:
    """True when SQL ``pgflow.is_valid_queue_name`` accepts ``value``: lowercase, digits, '_', 1..47."""
    return isinstance(value, str) and _QUEUE_NAME_RE.fullmatch(value) is not None


def shared_queue_problem(value: object) -> str | None:
    """Why ``value`` cannot name a shared queue, or None (SQL ``pgflow.provision_shared_queue`` agrees)."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    if not is_valid_queue_name(value):
        return (
            "is invalid: use lowercase letters, digits and underscores, "
            f"1..{MAX_QUEUE_NAME_LENGTH} characters"
        )
    if "__" in value:
        return "contains '__', which is reserved for generated queue names"
    return None


class QueueNameTooLong(InvalidSlug):
    """Neither generated name of a step's private queue fits PGMQ's limit."""


def step_queue_name(flow_slug: str, step_slug: str, step_index: int) -> str:
    """A step's private queue in a step-queued flow, as SQL ``pgflow.step_queue_name`` generates it:
    ``flow__step`` when that fits 47 characters, else ``flow__<zero-based index>``."""
    readable = f"{flow_slug}__{step_slug}".lower()
    if len(readable) <= MAX_QUEUE_NAME_LENGTH:
        return readable
    fallback = f"{flow_slug}__{step_index}".lower()
    if len(fallback) <= MAX_QUEUE_NAME_LENGTH:
        return fallback
    raise QueueNameTooLong(
        f"step {step_slug!r} of flow {flow_slug!r}: neither generated queue name {readable!r} "
        f"({len(readable)} characters) nor {fallback!r} ({len(fallback)} characters) fits PGMQ's "
        f"{MAX_QUEUE_NAME_LENGTH}-character limit; choose a flow slug of at most "
        f"{MAX_QUEUE_NAME_LENGTH - 2 - len(str(step_index))} characters"
    )


def task_flow_slug(module_path: str, queue_name: str) -> str:
    """The concrete flow slug of a task function on a queue: readable, valid under the slug rules,
    at most 47 characters, and unique per (function, queue) through a hash suffix."""
    digest = hashlib.sha256(f"{module_path}|{queue_name}".encode()).hexdigest()[:TASK_SLUG_DIGEST_CHARS]
    return f"{_task_slug_head(module_path)}_{digest}"


def is_task_flow_slug_of(flow_slug: str, module_path: str) -> bool:
    """True when ``flow_slug`` is the flow of the task ``module_path`` on some queue: its readable head
    and a hash suffix (the queue, which the hash hides, is not needed to tell)."""
    head, _, digest = version_of(flow_slug).rpartition("_")
    return head == _task_slug_head(module_path) and _TASK_DIGEST_RE.fullmatch(digest) is not None


def _task_slug_head(module_path: str) -> str:
    readable = re.sub(r"[^a-z0-9]+", "_", module_path.lower()).strip("_") or "task"
    if readable[0].isdigit():
        readable = f"t_{readable}"
    return readable[: MAX_FLOW_SLUG_LENGTH - TASK_SLUG_DIGEST_CHARS - 1].rstrip("_")


_TASK_DIGEST_RE: Final = re.compile(rf"[0-9a-f]{{{TASK_SLUG_DIGEST_CHARS}}}")


_VERSION_SUFFIX_RE: Final = re.compile(r"___v([2-9]|[1-9][0-9]+)$")


def version_number(stored_slug: str) -> int:
    """The version a stored slug names: N for ``f___vN``, 1 for ``f``."""
    found = _VERSION_SUFFIX_RE.search(stored_slug)
    return int(found.group(1)) if found else 1


def version_of(stored_slug: str) -> str:
    """The flow a version's stored slug belongs to, as SQL ``pgflow.version_of`` says: version N >= 2
    of flow ``f`` is stored as ``f___vN`` (a name no slug or generated queue can take), version 1 as ``f``."""
    return _VERSION_SUFFIX_RE.sub("", stored_slug)
