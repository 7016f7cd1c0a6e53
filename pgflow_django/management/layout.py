"""Terminal layout of the commands' tables: fit the width, never cut a word or an id.

``FitTable`` is laid out when it is printed, at the console's width (a terminal's, else ``COLUMNS``,
else 80: see ``cli.make_console``). When every column fits at the width of its longest word, it is a
table whose free text wraps between words; when it does not (a run id is 36 characters, a flow slug up
to 47), each row becomes a record: its title values on a line, then ``header: value`` entries wrapped
between entries, never inside one, and a blank line before the next record. A word is cut only when
it alone is wider than the line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from django.utils import timezone
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Cell = str | Text
"""One value; a tuple of them is one value per header line of a stacked column."""

INDENT: Final = 2
"""The indent of a record's entries below its title line."""


@dataclass(frozen=True)
class Column:
    """A column of a :class:`FitTable`.

    ``header`` is one field (its lines are the header's, ``"next\nfire"``), or a tuple of fields
    stacked in one column, each cell a tuple with a value per field. ``title``: in the
    record layout, the column's first value heads the record, without its header. ``no_wrap``: values
    keep their lines (an id, a time). ``min_width``: free text is not squeezed narrower than this; a
    table that would need it narrower is shown as records instead. ``label``: the key of the column's
    entries in a record, when it differs from the header (``FLOW`` reads ``flow``)."""

    header: str | tuple[str, ...]
    justify: str = "left"
    title: bool = False
    no_wrap: bool = False
    min_width: int = 0
    label: str = ""

    @property
    def headers(self) -> tuple[str, ...]:
        return (self.header,) if isinstance(self.header, str) else self.header


class FitTable:
    """A table that fits the width it is printed at, or one record per row below it."""

    def __init__(
        self,
        *columns: Column,
        title: str | None = None,
        lined: bool = True,
        header_style: str = "bold",
    ) -> None:
        self.columns = columns
        self.title = title
        self.lined = lined
        """A rule under the headers (``box.SIMPLE_HEAD``); else none (``box=None``), for plain listings."""
        self.header_style = header_style
        self.rows: list[tuple[tuple[Text, ...], ...]] = []
        self.sections: list[bool] = []

    def add_row(self, *cells: Cell | tuple[Cell, ...], end_section: bool = False) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(tuple(_parts(cell) for cell in cells))
        self.sections.append(end_section)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(options.max_width, INDENT + 1), options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        widths = self.column_widths(console, options, width)
        if widths is not None:
            yield self._table(widths)
        else:
            if self.title:
                yield Text(self.title, style="italic")
            for number, row in enumerate(self.rows):
                if number:
                    yield Text()
                yield from self._record(row, width)

    # -- the table ----------------------------------------------------------------------------------

    def column_widths(self, console: Console, options: ConsoleOptions, width: int) -> list[int] | None:
        """Each column's width in a table of at most ``width`` cells, or None when some column would
        have to be narrower than its longest word (or its ``min_width``)."""
        overhead = self._overhead(console, options)
        lowest, natural = [], []
        for index, column in enumerate(self.columns):
            texts = [Text(line) for line in column.headers]
            texts += [part for row in self.rows for part in row[index]]
            longest_line = max((_longest_line(text) for text in texts), default=0)
            widest = longest_line if column.no_wrap else max((_longest_word(t) for t in texts), default=0)
            lowest.append(max(widest, min(column.min_width, longest_line)))
            natural.append(longest_line)
        room = width - overhead
        if sum(lowest) > room:
            return None
        widths = list(natural)
        excess = sum(widths) - room
        while excess > 0:  # the widest column gives way first (long free text), one cell at a time
            index = max((i for i in range(len(widths)) if widths[i] > lowest[i]), key=lambda i: widths[i])
            widths[index] -= 1
            excess -= 1
        return widths

    def _style(self) -> dict[str, object]:
        if self.lined:
            return {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "padding": (0, 0, 0, 1)}
        return {"box": None, "pad_edge": False, "padding": (0, 0, 0, 2)}

    def _overhead(self, console: Console, options: ConsoleOptions) -> int:
        """The cells a table adds to its columns' widths (padding, separators)."""
        probe = Table(**self._style())  # type: ignore[arg-type]
        for _ in self.columns:
            probe.add_column(width=1)
        measured = Measurement.get(console, options.update_width(10**6), probe)
        return measured.maximum - len(self.columns)

    def _table(self, widths: Sequence[int]) -> Table:
        table = Table(
            **self._style(),  # type: ignore[arg-type]
            title=self.title,
            title_justify="left",
            title_style="italic",
            header_style=self.header_style,
        )
        for column, width in zip(self.columns, widths, strict=True):
            table.add_column(
                "\n".join(column.headers),
                justify=column.justify,  # type: ignore[arg-type]
                width=width,
                overflow="fold",
                no_wrap=column.no_wrap,
            )
        for row, end_section in zip(self.rows, self.sections, strict=True):
            table.add_row(*(Text("\n").join(parts) for parts in row), end_section=end_section)
        return table

    # -- the records --------------------------------------------------------------------------------

    def _record(self, row: tuple[tuple[Text, ...], ...], width: int) -> RenderResult:
        head: Text | None = None
        entries: list[Text] = []
        for column, parts in zip(self.columns, row, strict=True):
            headers = (column.label,) if column.label else column.headers
            for position, part in enumerate(parts):
                if not part.plain.strip():
                    continue
                value = _one_line(part)
                if column.title and position == 0:
                    if head is None:
                        head = value.copy()
                        head.stylize("bold")
                        continue
                    if head.cell_len + 2 + value.cell_len <= width:
                        head.append("  ")
                        head.append_text(value)
                        continue
                key = " ".join(headers[position].split()) if position < len(headers) else ""
                entries.append(Text.assemble(f"{key}: ", value) if key else value)
        if head is not None:
            yield head
        yield from _entries(entries, width)


class Wrapped:
    """Entries left to right, separated by two spaces and wrapped between entries: a line breaks
    inside an entry only when that entry alone is wider than the terminal."""

    def __init__(self, entries: list[Text], *, indent: int = 0) -> None:
        self.entries = entries
        self.indent = indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width, self.indent + 1)
        line, used = Text(" " * self.indent), self.indent
        for entry in self.entries:
            if used > self.indent and used + 2 + entry.cell_len > width:
                yield line
                line, used = Text(" " * self.indent), self.indent
            if used > self.indent:
                line.append("  ")
                used += 2
            line.append_text(entry)
            used += entry.cell_len
        yield line


class Hanging:
    """One long entry wrapped between words, its first line at ``indent`` and the rest two further."""

    def __init__(self, entry: Text, *, indent: int) -> None:
        self.entry = entry
        self.indent = indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        inner = max(options.max_width - self.indent - 2, 1)
        for number, line in enumerate(self.entry.wrap(console, inner, overflow="fold")):
            line.rstrip()
            yield Text(" " * (self.indent + (2 if number else 0))) + line


def _entries(entries: Iterable[Text], width: int) -> RenderResult:
    """A record's entries: short ones wrapped between entries, a long one on lines of its own."""
    short: list[Text] = []
    for entry in entries:
        if entry.cell_len > width - INDENT:
            if short:
                yield Wrapped(short, indent=INDENT)
                short = []
            yield Hanging(entry, indent=INDENT)
        else:
            short.append(entry)
    if short:
        yield Wrapped(short, indent=INDENT)


def _parts(cell: Cell | tuple[Cell, ...]) -> tuple[Text, ...]:
    values = cell if isinstance(cell, tuple) else (cell,)
    return tuple(value if isinstance(value, Text) else Text(value) for value in values)


def _one_line(text: Text) -> Text:
    """A value's lines joined by spaces (a stacked date and time reads ``01-05 12:00:00``)."""
    return Text(" ").join(line for line in text.split("\n") if line.plain.strip())


def _longest_line(text: Text) -> int:
    return max((cell_len(line) for line in text.plain.split("\n")), default=0)


def _longest_word(text: Text) -> int:
    return max((cell_len(word) for word in text.plain.split()), default=0)


def local_time(moment: datetime | None, *, zone: bool = False) -> str:
    """A time as the command tables show it: the current time zone, to the second ("-" for none);
    ``zone`` adds the zone's name, for a time in a sentence (``2026-12-06 22:37:16 UTC``)."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z" if zone else "%Y-%m-%d %H:%M:%S")
