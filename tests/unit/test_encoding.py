"""The one JSON rule and the text rule (``pgflow_django.runs.encoding``): what is accepted,
escaped, refused."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from typing import Any

import pytest

from pgflow_django.runs.encoding import (
    MAX_INT_DIGITS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    NotDecodable,
    NotEncodable,
    clean_text,
    decode_json,
    encode_json,
)


def nested(containers: int) -> Any:
    value: Any = []
    for _ in range(containers - 1):
        value = [value]
    return value


@pytest.mark.parametrize("escape_text", [True, False])
def test_djangos_types_become_strings_on_both_sides(escape_text: bool) -> None:
    value = {
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "on": datetime.date(2026, 1, 2),
        "amount": decimal.Decimal("1.50"),
        "id": uuid.UUID(int=1),
    }
    assert json.loads(encode_json(value, escape_text=escape_text)) == {
        "at": "2026-01-02T03:04:05Z",
        "on": "2026-01-02",
        "amount": "1.50",
        "id": "00000000-0000-0000-0000-000000000001",
    }


@pytest.mark.parametrize("escape_text", [True, False])
@pytest.mark.parametrize(
    ("value", "kind", "reason"),
    [
        (nested(MAX_JSON_DEPTH + 1), "bound", f"nested deeper than {MAX_JSON_DEPTH} levels"),
        ({"x": nested(MAX_JSON_DEPTH)}, "bound", f"nested deeper than {MAX_JSON_DEPTH} levels"),
        (nested(5000), "bound", f"nested deeper than {MAX_JSON_DEPTH} levels"),
        ([10**MAX_INT_DIGITS], "bound", f"integer exceeds {MAX_INT_DIGITS} digits"),
        ("x" * (MAX_JSON_BYTES + 1), "bound", "more than the"),
        ({1, 2}, "type", "not JSON-serialisable"),
        (float("nan"), "type", "not JSON-serialisable"),
    ],
)
def test_values_past_the_bounds_or_not_json_are_refused(
    value: Any, kind: str, reason: str, escape_text: bool
) -> None:
    with pytest.raises(NotEncodable) as info:
        encode_json(value, escape_text=escape_text)
    assert info.value.kind == kind and reason in info.value.reason


def test_values_at_the_bounds_are_accepted() -> None:
    assert json.loads(encode_json(nested(MAX_JSON_DEPTH), escape_text=False)) == nested(MAX_JSON_DEPTH)
    assert json.loads(encode_json([10**MAX_INT_DIGITS - 1], escape_text=False)) == [10**MAX_INT_DIGITS - 1]
    brackets = "[" * (MAX_JSON_DEPTH + 10)
    assert json.loads(encode_json({"text": brackets}, escape_text=False)) == {"text": brackets}


def test_one_level_deeper_than_the_bound_still_decodes_in_a_worker_thread() -> None:
    """A dependent's input (``{dep: output}``) or a run's output wraps an output once more."""
    import threading

    text = '{"dep":' + encode_json(nested(MAX_JSON_DEPTH), escape_text=True) + "}"  # as SQL builds it
    decoded: list[Any] = []
    thread = threading.Thread(target=lambda: decoded.append(decode_json(text)))
    thread.start()
    thread.join()
    assert decoded == [{"dep": nested(MAX_JSON_DEPTH)}]


def test_text_rule_escapes_nul_and_lone_surrogates_only() -> None:
    assert clean_text("a\x00b\ud800c\udfffd") == "a\\u0000b\\ud800c\\udfffd"
    assert clean_text("plain, \U0001f600, \\u0000 as text") == "plain, \U0001f600, \\u0000 as text"


def test_outputs_escape_strings_the_same_way_as_recorded_texts() -> None:
    value = {"t\x00": ["a\x00b", "\ud800", "\U0001f600", "\\u0000"]}
    assert json.loads(encode_json(value, escape_text=True)) == {
        clean_text("t\x00"): [clean_text("a\x00b"), clean_text("\ud800"), "\U0001f600", "\\u0000"]
    }


@pytest.mark.parametrize(
    ("value", "reason"),
    [("a\x00b", "NUL character"), (["\udc80"], "lone surrogate (\\udc80)"), ({"\x00": 1}, "NUL character")],
)
def test_inputs_refuse_nul_and_lone_surrogates(value: Any, reason: str) -> None:
    with pytest.raises(NotEncodable) as info:
        encode_json(value, escape_text=False)
    assert info.value.kind == "text" and reason in info.value.reason


def test_an_escaped_backslash_before_u0000_is_text_not_a_nul() -> None:
    assert json.loads(encode_json("\\u0000", escape_text=False)) == "\\u0000"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("9" * 5000, "integer exceeds 4300 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than Python's recursion limit"),
        ("{", "Expecting property name"),
    ],
)
def test_undecodable_json_names_its_reason(text: str, reason: str) -> None:
    with pytest.raises(NotDecodable) as info:
        decode_json(text)
    assert info.value.reason.startswith(reason)
