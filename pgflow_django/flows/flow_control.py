"""Flow control by key: ``Concurrency`` and ``RateLimit``, declared on a flow or a step and enforced by the
claim in the database (``pgflow.limit_claim``), so the limits hold across every worker and machine.

Pure Python like the DSL: every mistake is one line when the flow is defined (the DSL raises it as a
``FlowDefinitionError``). A key is the name of a field of the run input (read by the database when a
task is claimed) or a callable on the run input (evaluated in Python where the run starts, and stored
with the run).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

Key: TypeAlias = str | Callable[[Any], Any] | None
"""A limit's key: an input field name, a callable on the run input, or None (one key for the scope)."""
LimitKind: TypeAlias = Literal["concurrency", "rate"]

RATE_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE: Final = re.compile(r"([1-9][0-9]*)/([1-9][0-9]*)?([smhd])")
RATE_FORMAT: Final = 'write N/unit with unit s, m, h or d, e.g. "100/m", or N/<count><unit> as in "10/30s"'
MAX_AMOUNT: Final = 2**31 - 1


class InvalidLimit(ValueError):
    """A limit the engine would refuse; the DSL raises it as its ``FlowDefinitionError``."""


def parse_rate(owner: str, spec: object) -> tuple[int, int]:
    """``"100/m"`` -> (100, 60): tokens and the seconds they refill over; anything else is refused."""
    match = _RATE.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise InvalidLimit(f"{owner}: rate_limit {spec!r} is not a rate; {RATE_FORMAT}")
    amount = int(match.group(1))
    period = int(match.group(2) or 1) * RATE_UNITS[match.group(3)]
    if amount > MAX_AMOUNT or period > MAX_AMOUNT:
        raise InvalidLimit(f"{owner}: rate_limit {spec!r} is too large; at most {MAX_AMOUNT} per period")
    return amount, period


def _key(owner: str, what: str, key: object) -> Key:
    if key is None or callable(key):
        return key
    if isinstance(key, str) and key:
        return key
    raise InvalidLimit(
        f"{owner}: {what} key must be an input field name, a callable on the run input or None, got {key!r}"
    )


def _positive(owner: str, what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_AMOUNT:
        raise InvalidLimit(f"{owner}: {what} must be an integer from 1 to {MAX_AMOUNT}, got {value!r}")
    return value


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` tasks of one ``key`` started at once, across every worker."""

    limit: int
    key: Key = None


@dataclass(frozen=True)
class RateLimit:
    """A token bucket per ``key``: ``rate`` (``"100/m"``) tokens a period, holding at most ``burst``."""

    rate: str
    key: Key = None
    burst: int = 1


@dataclass(frozen=True)
class Limit:
    """One checked limit of a flow (``step_slug`` '') or a step, as ``pgflow.set_flow_limits`` takes it."""

    step_slug: str
    kind: LimitKind
    amount: int
    key: Key = field(default=None, compare=False)
    period: int | None = None
    burst: int | None = None

    @property
    def key_source(self) -> str:
        return "none" if self.key is None else "input" if isinstance(self.key, str) else "stored"

    def row(self) -> dict[str, Any]:
        return {
            "step_slug": self.step_slug,
            "kind": self.kind,
            "key_source": self.key_source,
            "key_field": self.key if isinstance(self.key, str) else None,
            "amount": self.amount,
            "period": self.period,
            "burst": self.burst,
        }

    def key_of(self, flow_input: Any) -> str:
        """A callable key's value for one run input, as stored with the run (None is '')."""
        assert callable(self.key)
        value = self.key(flow_input)
        return "" if value is None else str(value)


def limits_for(owner: str, step_slug: str, concurrency: object, rate_limit: object) -> tuple[Limit, ...]:
    """The checked limits of one scope from the ``concurrency=`` and ``rate_limit=`` options."""
    found: list[Limit] = []
    if concurrency is not None:
        if not isinstance(concurrency, Concurrency):
            raise InvalidLimit(
                f"{owner}: concurrency must be Concurrency(limit=N, key=...), "
                f"got {type(concurrency).__name__}"
            )
        found.append(
            Limit(
                step_slug,
                "concurrency",
                _positive(owner, "Concurrency limit", concurrency.limit),
                _key(owner, "Concurrency", concurrency.key),
            )
        )
    if rate_limit is not None:
        spec = rate_limit if isinstance(rate_limit, RateLimit) else RateLimit(rate_limit)  # type: ignore[arg-type]
        amount, period = parse_rate(owner, spec.rate)
        found.append(
            Limit(
                step_slug,
                "rate",
                amount,
                _key(owner, "RateLimit", spec.key),
                period,
                _positive(owner, "RateLimit burst", spec.burst),
            )
        )
    return tuple(found)


def describe(
    kind: str, key_source: str, key_field: str | None, amount: int, period: float | None, burst: int | None
) -> str:
    """One limit as a person reads it: ``concurrency 2 per tenant_id``, ``rate 100/60 s (burst 1)``."""
    key = {"none": "", "input": f" per {key_field}", "stored": " per key from the start"}.get(key_source, "")
    if kind == "rate":
        return f"rate {amount}/{period:g} s (burst {burst}){key}"
    return f"concurrency {amount}{key}"
