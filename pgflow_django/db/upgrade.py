"""The safety net of migration 0003 (persisted queue identity): one shipped audit, two ways to run it.

``manage.py pgflow_audit`` runs the audit read-only before an upgrade; the migration runs it again
through ``preflight`` under its locks, because data can change between the two and only a check
made under the locks proves the state the migration then changes. Both read the frozen SQL file
``sql/audits/0003_queue_identity_audit.sql``, which uses baseline objects only, so it runs on a
database that has not been upgraded yet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from pgflow_django.db import queries
from pgflow_django.db.catalog import Cursor
from pgflow_django.db.query import fetch_value
from pgflow_django.sql import AUDITS_DIR

AUDIT_FILE: Final = "0003_queue_identity_audit.sql"
REFINED_AUDIT_FILE: Final = "0005_step_queues_audit.sql"
"""Checks of the audit redefined (same names) for databases that have 0005's queue modes."""
MIGRATE_LOCK: Final = "pgflow:migrate"
"""Key of the advisory lock that serialises pgflow migrations (exclusive) and compilations (shared)."""
MAX_SAMPLES: Final = 5
DOCS: Final = "docs/upgrading.md"

_MARKER: Final = re.compile(r"^-- check: (?P<name>\S+)[ \t]*$", re.MULTILINE)
_NAME: Final = re.compile(r"^[a-z][a-z0-9_]*$")
_UNSET: Final = object()
_KEY_ORDER: Final = {
    key: position
    for position, key in enumerate(
        ("queue_name", "flow_slug", "flow_slugs", "step_slug", "step_slugs", "message_id")
    )
}
"""Sample keys are shown in this order (jsonb sorts keys by length)."""


class AuditFileError(RuntimeError):
    """The shipped audit file does not have the agreed format (a packaging or editing mistake)."""


class UpgradeBlocked(RuntimeError):
    """The preflight found data the upgrade cannot convert; nothing was changed. ``str()`` is the report."""

    def __init__(self, report: str, findings: Sequence[Finding]) -> None:
        super().__init__(report)
        self.report = report
        self.findings = list(findings)


@dataclass(frozen=True)
class AuditCheck:
    """One statement of the audit file: its marker name, SQL and the comment paragraph describing it."""

    name: str
    sql: str
    description: str = ""


@dataclass(frozen=True)
class Finding:
    """The result of one check; ``problem_count == 0`` means it passed (``samples`` is then empty)."""

    check: str
    problem_count: int
    samples: list[dict[str, Any]] = field(default_factory=list)
    hint: str = ""
    description: str = ""

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "ok": self.ok,
            "problem_count": self.problem_count,
            "samples": self.samples,
            "hint": None if self.ok else self.hint,
            "description": self.description,
        }


Progress = Callable[[AuditCheck, int, int], None]
"""Called before each check with the check, its 0-based position and the number of checks."""


def load_audit_checks(text: str | None = None, source: str = AUDIT_FILE) -> list[AuditCheck]:
    """Parse the audit file (or ``text``): one check per ``-- check: <name>`` marker, in file order."""
    if text is None:
        text = (AUDITS_DIR / source).read_text(encoding="utf-8")
    markers = list(_MARKER.finditer(text))
    if not markers:
        raise AuditFileError(f"{source} has no '-- check: <name>' marker")
    checks: list[AuditCheck] = []
    for marker, following in zip(markers, [*markers[1:], None], strict=True):
        name = marker["name"]
        body = text[marker.end() : following.start() if following else len(text)]
        lines = body.strip().splitlines()
        comments: list[str] = []
        while lines and lines[0].startswith("--"):
            comments.append(lines.pop(0).removeprefix("--").strip())
        if "" in comments:
            comments = comments[: comments.index("")]
        sql = "\n".join(lines).strip().removesuffix(";").rstrip()
        if not _NAME.match(name) or any(check.name == name for check in checks):
            raise AuditFileError(f"{source}: check name {name!r} is invalid or repeated")
        if not sql.lower().startswith(("select", "with")) or ";" in _strip_literals(sql):
            raise AuditFileError(f"{source}: check {name} must be exactly one SELECT statement")
        checks.append(AuditCheck(name, sql, " ".join(comments)))
    return checks


def run_audit(
    cursor: Cursor, progress: Progress | None = None, checks: Sequence[AuditCheck] | None = None
) -> list[Finding]:
    """Run every check on ``cursor`` (inside the caller's transaction) and return one finding per check."""
    checks = current_audit_checks(cursor) if checks is None else list(checks)
    findings = []
    for index, check in enumerate(checks):
        if progress is not None:
            progress(check, index, len(checks))
        cursor.execute(check.sql)
        findings.append(_finding(check, cursor.fetchall()))
    return findings


def current_audit_checks(cursor: Cursor) -> list[AuditCheck]:
    """The audit's checks, with the refined ones in place of the originals once the database has the
    queue modes of migration 0005 (before it, every flow is plain and the originals are exact)."""
    checks = load_audit_checks()
    if not fetch_value(cursor, queries.HAS_QUEUE_MODES):
        return checks
    refined = {check.name: check for check in load_audit_checks(source=REFINED_AUDIT_FILE)}
    return [refined.get(check.name, check) for check in checks]


def format_report(findings: Sequence[Finding], *, heading: str | None = None) -> str:
    """One plain-text report: each failing check with its count, sample keys and repair hint."""
    failing = [finding for finding in findings if not finding.ok]
    lines = [heading] if heading else []
    if not failing:
        lines.append(f"pgflow audit: all {len(findings)} checks passed; the database can be upgraded")
        return "\n".join(lines)
    lines.append(
        f"pgflow audit: {len(failing)} of {len(findings)} checks found problems that block the upgrade "
        f"(repairs: {DOCS})"
    )
    for finding in failing:
        lines.append("")
        lines.append(f"{finding.check}: {finding.problem_count} problem(s)")
        if finding.description:
            lines.append(f"  {finding.description}")
        lines.extend(f"  - {_sample_text(sample)}" for sample in finding.samples)
        hidden = finding.problem_count - len(finding.samples)
        if hidden > 0:
            lines.append(f"  ... and {hidden} more")
        lines.append(f"  repair: {finding.hint}")
    passed = [finding.check for finding in findings if finding.ok]
    if passed:
        lines.append("")
        lines.append(f"passed: {', '.join(passed)}")
    return "\n".join(lines)


def preflight(cursor: Cursor, *, lock_timeout: Any = _UNSET) -> list[Finding]:
    """Lock, audit, and raise ``UpgradeBlocked`` (the report) when anything is found.

    Must run inside the migration's transaction, before its first change: the advisory lock and the
    table locks then hold until the delta has committed, so nothing can invalidate what was checked.
    Lock waits are bounded by ``lock_timeout`` (seconds or a timedelta; default: django-pgmigrate's
    ``PGMIGRATE_LOCK_TIMEOUT``), set for this transaction only; ``None`` keeps the session's value.
    """
    milliseconds = lock_timeout_milliseconds(
        _configured_lock_timeout() if lock_timeout is _UNSET else lock_timeout
    )
    if milliseconds is not None:
        fetch_value(cursor, queries.SET_LOCK_TIMEOUT, [f"{milliseconds}ms"])
    fetch_value(cursor, queries.MIGRATE_LOCK, [MIGRATE_LOCK])
    if not fetch_value(cursor, queries.HOLDS_MIGRATE_LOCK, [MIGRATE_LOCK]):
        raise RuntimeError("the pgflow upgrade preflight must run inside the migration's transaction")
    fetch_value(cursor, queries.LOCK_UPGRADE_TABLES)
    fetch_value(cursor, queries.LOCK_PGMQ_META)
    findings = run_audit(cursor)
    if any(not finding.ok for finding in findings):
        heading = "pgflow migration 0003 stopped before changing anything: the audit found problems."
        raise UpgradeBlocked(format_report(findings, heading=heading), findings)
    return findings


def migration_preflight(apps: Any, schema_editor: Any) -> None:
    """``RunPython`` entry point: the preflight on the migration's connection."""
    with schema_editor.connection.cursor() as cursor:
        preflight(cursor)


def _configured_lock_timeout() -> Any:
    from django.conf import settings

    return getattr(settings, "PGMIGRATE_LOCK_TIMEOUT", None)


def lock_timeout_milliseconds(value: Any) -> int | None:
    """A lock timeout in seconds (or a timedelta) as PostgreSQL's whole milliseconds; None (no
    timeout) when unset or not positive. ``manage.py check`` validates the setting with it."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"lock timeout must be a number of seconds or a timedelta, got {value!r}")
    if seconds <= 0:
        return None
    return max(1, round(seconds * 1000))


def _finding(check: AuditCheck, rows: Any) -> Finding:
    if len(rows) != 1 or len(rows[0]) != 4:
        raise AuditFileError(f"check {check.name} must return one row of 4 columns, got {rows!r}")
    name, count, samples, hint = rows[0]
    if name != check.name:
        raise AuditFileError(f"check {check.name} reports itself as {name!r}")
    if isinstance(samples, str):
        samples = json.loads(samples)
    if not isinstance(samples, list) or len(samples) > MAX_SAMPLES:
        raise AuditFileError(f"check {check.name} must return at most {MAX_SAMPLES} samples as a JSON array")
    return Finding(check.name, int(count), samples, str(hint), check.description)


def _sample_text(sample: dict[str, Any]) -> str:
    parts = []
    for key, value in sorted(sample.items(), key=lambda item: _KEY_ORDER.get(item[0], len(_KEY_ORDER))):
        if value is None:
            continue
        shown = ", ".join(str(item) for item in value) if isinstance(value, list) else value
        parts.append(f"{key}={shown}")
    return " ".join(parts)


def _strip_literals(sql: str) -> str:
    """The SQL without its quoted strings, so a ';' inside a literal is not taken for a second statement."""
    return re.sub(r"'(?:[^']|'')*'", "''", sql)
