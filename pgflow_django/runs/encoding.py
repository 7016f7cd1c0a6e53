"""One JSON rule for every value the engine stores, and one text rule for every text it records.

Values enter at ``start_flow(s)`` (run inputs, the tasks backend's arguments) and at handler outputs
(the tasks backend's results). Both sides encode with Django's ``DjangoJSONEncoder`` (datetimes,
dates, times, durations, decimals, UUIDs and lazy strings become strings), refuse NaN and infinities,
and are bounded so that nothing stored can later be undecodable by the engine's own worker: SQL builds
a step's input one level deeper than its dependencies' outputs (``{dep: output}``), and a run's output
one level deeper than its leaf steps', so ``MAX_JSON_DEPTH`` stays well below what Python decodes
(about 990 levels on a thread of Python 3.11).

PostgreSQL cannot store NUL in text or jsonb, nor a lone UTF-16 surrogate. Texts the engine records
after a handler ran (errors, retry messages, outputs, task results) are escaped with ``clean_text``:
refusing them would lose the real error, or fail a task whose effects already happened. Run inputs,
whose caller is there to fix them, are refused instead.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Final

from django.core.serializers.json import DjangoJSONEncoder

MAX_JSON_DEPTH: Final = 500
"""Containers (arrays, objects) nested in one input or output, the outermost counted."""
MAX_JSON_BYTES: Final = 16 * 1024 * 1024
"""UTF-8 bytes of one encoded input or output."""
MAX_INT_DIGITS: Final = 4300
"""Digits of one integer: Python's default ``sys.get_int_max_str_digits()``, which json.loads obeys."""

_INT_BOUND: Final = 10**MAX_INT_DIGITS
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NUL_ESCAPE: Final = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
"""A JSON ``\\u0000`` escape that is not an escaped backslash followed by ``u0000``."""
_CONTAINERS: Final = (dict, list, tuple)


class NotEncodable(ValueError):
    """A value the engine will not store; ``reason`` says why in a few words, ``kind`` is ``type``
    (not JSON), ``text`` (NUL or a lone surrogate, when not escaped) or ``bound`` (too deep or large)."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class OutputNotSerialisable(TypeError):
    """A handler's or task's output breaks the engine's JSON rule: no retry changes that, so the task
    fails at once."""

    pgflow_permanent = True


class NotDecodable(ValueError):
    """Stored JSON this process cannot decode (written by other means than the engine's API)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def clean_text(text: str) -> str:
    """``text`` with NUL as the six characters ``\\u0000`` and each lone surrogate as ``\\udXXX``."""
    if "\x00" not in text and not _SURROGATE.search(text):
        return text
    text = text.replace("\x00", "\\u0000")
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def check_storable_text(value: str, what: str) -> None:
    """Refuse a caller's plain text PostgreSQL cannot hold (NUL, a lone surrogate) before any SQL runs:
    the caller can fix it, unlike a recorded error, which ``clean_text`` escapes instead."""
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character, which PostgreSQL cannot store; remove it")
    if _SURROGATE.search(value) is not None:
        raise ValueError(f"{what} is not valid UTF-8 text (it holds a lone surrogate); pass plain text")


def idempotency_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be an idempotency key (None when it can): NUL separates it from the flow
    slug in what its run id hashes, and a lone surrogate has no UTF-8 bytes to hash."""
    if not isinstance(key, str) or not key or "\x00" in key:
        return f"must be a non-empty string without NUL, got {key!r}"
    surrogate = _SURROGATE.search(key)
    if surrogate is not None:
        return (
            f"is not valid UTF-8 text (it holds a lone surrogate, \\u{ord(surrogate.group()):04x}); "
            "pass plain text"
        )
    return None


def encode_json(value: Any, *, escape_text: bool) -> str:
    """JSON text of ``value`` within the engine's bounds, or ``NotEncodable``.

    ``escape_text`` escapes NUL and lone surrogates inside strings as ``clean_text`` does; without it
    they are refused. The bounds are checked on the encoded text first (C-speed scans), and the value
    is walked only when a scan says it might exceed one (more brackets than the depth bound)."""
    try:
        text = json.dumps(
            value, cls=DjangoJSONEncoder, allow_nan=False, ensure_ascii=False, separators=(",", ":")
        )
    except RecursionError:
        raise NotEncodable(f"nested deeper than {MAX_JSON_DEPTH} levels", "bound") from None
    except (TypeError, ValueError) as exc:
        if "integer string conversion" in str(exc):
            raise NotEncodable(f"integer exceeds {MAX_INT_DIGITS} digits", "bound") from None
        raise NotEncodable(f"not JSON-serialisable: {_first_line(exc)}", "type") from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _too_deep(value):
        raise NotEncodable(f"nested deeper than {MAX_JSON_DEPTH} levels", "bound")
    if not 0 < sys.get_int_max_str_digits() <= MAX_INT_DIGITS:
        _check_integers(value)  # json.dumps enforced the bound itself, unless the process raised it
    nul = "\\u0000" in text and _NUL_ESCAPE.search(text) is not None
    surrogate = _SURROGATE.search(text)
    if not escape_text:
        if nul:
            raise NotEncodable("contains a NUL character (\\u0000), which PostgreSQL cannot store", "text")
        if surrogate is not None:
            raise NotEncodable(
                f"contains a lone surrogate (\\u{ord(surrogate.group()):04x}), which PostgreSQL cannot store",
                "text",
            )
    else:
        # both only occur inside strings: an escaped backslash keeps the escape as text when decoded
        if nul:
            text = _NUL_ESCAPE.sub(r"\1\\\\u0000", text)
        if surrogate is not None:
            text = _SURROGATE.sub(lambda match: f"\\\\u{ord(match.group()):04x}", text)
    size = len(text) if len(text) * 4 <= MAX_JSON_BYTES else len(text.encode("utf-8"))
    if size > MAX_JSON_BYTES:
        raise NotEncodable(f"{size} bytes of JSON, more than the {MAX_JSON_BYTES} allowed", "bound")
    return text


def decode_json(text: str) -> Any:
    """The value of stored JSON text, or ``NotDecodable`` naming why this process cannot decode it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NotDecodable("nested deeper than Python's recursion limit") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise NotDecodable(f"integer exceeds {sys.get_int_max_str_digits()} digits") from None
        raise NotDecodable(_first_line(exc)) from None


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests more than ``MAX_JSON_DEPTH`` containers, level by level (no recursion,
    and only containers are kept from one level to the next)."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below.extend([child for child in children if isinstance(child, _CONTAINERS)])
        level = below
    return False


def _check_integers(value: Any) -> None:
    """Walk ``value`` without recursion (its depth is already bounded) for integers too long."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= _INT_BOUND:
            raise NotEncodable(f"integer exceeds {MAX_INT_DIGITS} digits", "bound")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def encode_output(output: Any) -> str:
    """JSON text of a handler output under the engine's one JSON rule; falsy values stay themselves,
    NUL and lone surrogates in strings are escaped, NaN, unknown types and values past the bounds are
    refused."""
    try:
        return encode_json(output, escape_text=True)
    except NotEncodable as exc:
        raise OutputNotSerialisable(f"output not encodable: {exc.reason}") from None
