"""The figures of one bench run: the table printed at the end and the JSON written under bench/results/."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REFERENCE = "raw_2_clients"
"""The figure every rate is divided by: raw PGMQ send_batch+read+archive, batches of 100, 2 clients."""


@dataclass
class Figure:
    key: str
    section: str
    label: str
    value: float
    unit: str
    is_rate: bool = True
    """Rates get a ratio to the reference; latencies and memory do not."""
    runs_per_second: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """A goal for one figure (or its ratio to the reference); checked and printed, never asserted."""

    name: str
    key: str
    comparison: str
    limit: float
    ratio: bool = False
    versus: str | None = None
    """Another figure's key: the target is on this figure's value divided by that one's."""


@dataclass
class Report:
    meta: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    sync_off: dict[str, float] = field(default_factory=dict)
    """The same figures measured again with synchronous_commit off, shown beside, never instead."""
    profiles: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    hop_profile: dict[str, Any] = field(default_factory=dict)
    """The floor reference's hop profile (bench/floor.py): per chain and per task, floor and engine."""
    notes: list[str] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def get(self, key: str) -> Figure | None:
        return next((figure for figure in self.figures if figure.key == key), None)

    def ratio(self, value: float, is_rate: bool) -> float | None:
        reference = self.get(REFERENCE)
        if not is_rate or reference is None or reference.value <= 0:
            return None
        return value / reference.value

    def check_targets(self, targets: tuple[Target, ...]) -> None:
        for target in targets:
            figure = self.get(target.key)
            if figure is None:
                continue
            value = self.ratio(figure.value, True) if target.ratio else figure.value
            if target.versus is not None:
                other = self.get(target.versus)
                if other is None or other.value <= 0:
                    continue
                value = figure.value / other.value
            if value is None:
                continue
            met = value >= target.limit if target.comparison == ">=" else value <= target.limit
            self.targets.append(
                {
                    "name": target.name,
                    "value": value,
                    "comparison": target.comparison,
                    "limit": target.limit,
                    "ratio": target.ratio or target.versus is not None,
                    "met": met,
                }
            )

    def as_dict(self) -> dict[str, Any]:
        figures = []
        for figure in self.figures:
            item = asdict(figure)
            item["ratio_to_raw"] = self.ratio(figure.value, figure.is_rate)
            if figure.key in self.sync_off:
                item["sync_commit_off"] = self.sync_off[figure.key]
            figures.append(item)
        return {
            "meta": self.meta,
            "reference": REFERENCE,
            "figures": figures,
            "targets": self.targets,
            "profiles": self.profiles,
            "hop_profile": self.hop_profile,
            "notes": self.notes,
        }

    def write(self, directory: Path, stamp: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{stamp}.json"
        path.write_text(json.dumps(self.as_dict(), indent=2, default=str) + "\n")
        return path

    def print(self, console: Console) -> None:
        meta = self.meta
        server = meta.get("server", {})
        console.print(
            f"[bold]pgflow-django bench[/] {meta.get('started_at', '')}  "
            f"PostgreSQL {server.get('version', '?')}  cores={server.get('cpu_count', '?')}  "
            f"mode={'quick' if meta.get('quick') else 'full'}  "
            f"load average at start {_load(meta.get('load_average_at_start'))}"
        )
        console.print(
            "synchronous_commit: server default "
            f"[bold]{meta.get('server_default_synchronous_commit', '?')}[/], "
            f"bench database [bold]{server.get('synchronous_commit', '?')}[/] (headline figures); "
            f"fsync {server.get('fsync', '?')}"
        )
        table = Table(title="figures (ratio = figure / raw PGMQ 2-client batched cycle rate)")
        table.add_column("section")
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_column("unit")
        table.add_column("ratio", justify="right")
        table.add_column("runs/s", justify="right")
        if self.sync_off:
            table.add_column("sync_commit off (beside)", justify="right")
        order = {name: index for index, name in reversed(list(enumerate(f.section for f in self.figures)))}
        section = None
        for figure in sorted(self.figures, key=lambda f: order[f.section]):
            ratio = self.ratio(figure.value, figure.is_rate)
            row = [
                figure.section if figure.section != section else "",
                figure.label,
                _number(figure.value),
                figure.unit,
                "—" if ratio is None else f"{ratio:.1%}",
                "" if figure.runs_per_second is None else _number(figure.runs_per_second),
            ]
            if self.sync_off:
                off = self.sync_off.get(figure.key)
                row.append("" if off is None else _number(off))
            if figure.section != section and section is not None:
                table.add_section()
            section = figure.section
            table.add_row(*row)
        console.print(table)
        self._print_cpu(console)
        self._print_hop_profile(console)
        for name, rows in self.profiles.items():
            profile = Table(title=f"pg_stat_user_functions during {name} (self time, ms)")
            for column in ("function", "calls", "total_ms", "self_ms", "self_ms_per_call"):
                profile.add_column(column, justify="left" if column == "function" else "right")
            for item in rows:
                profile.add_row(*(str(item[column]) for column in item))
            console.print(profile)
        if self.targets:
            caveat = " (quick mode: tiny counts, not meaningful)" if meta.get("quick") else ""
            console.print(f"targets of the issues, reported, never asserted{caveat}:")
        for target in self.targets:
            if target["ratio"] and target["comparison"] == "<=":
                shown = f"{target['value']:.2f}x, needs <= {target['limit']:g}x"
            elif target["ratio"]:
                shown = f"{target['value']:.1%}, needs {target['comparison']} {target['limit']:.0%}"
            else:
                shown = f"{target['value']:.1f}, needs {target['comparison']} {target['limit']:g}"
            verdict = "[green]met[/]" if target["met"] else "[red]missed[/]"
            console.print(f"  {target['name']}: {shown}: {verdict}")
        for note in self.notes:
            console.print(f"note: {note}")

    def _print_cpu(self, console: Console) -> None:
        """CPU per message or task, where measured: PostgreSQL backends versus the Python processes."""
        rows = [f for f in self.figures if "python_cpu_ms_per_item" in f.detail]
        if not rows:
            return
        table = Table(
            title="CPU per message/task (ms): where the time goes (x raw = PostgreSQL CPU / the reference's)"
        )
        table.add_column("section")
        table.add_column("figure")
        table.add_column("PostgreSQL", justify="right")
        table.add_column("x raw", justify="right")
        table.add_column("Python (client/worker)", justify="right")
        reference = self.get(REFERENCE)
        raw = reference.detail.get("postgres_cpu_ms_per_item") if reference is not None else None
        for figure in rows:
            server = figure.detail.get("postgres_cpu_ms_per_item")
            table.add_row(
                figure.section,
                figure.label,
                "n/a" if server is None else f"{server:.3f}",
                "" if server is None or not raw else f"{server / raw:.1f}",
                f"{figure.detail['python_cpu_ms_per_item']:.3f}",
            )
        console.print(table)

    def _print_hop_profile(self, console: Console) -> None:
        """Statements, calls, rows and WAL per chain of the floor and of the engine's chain SQL."""
        sides = self.hop_profile.get("sides", {})
        if not sides:
            return
        table = Table(
            title=f"hop profile, {self.hop_profile.get('chains')} 3-step chains replayed on one connection"
        )
        table.add_column("per chain (WAL: per task)")
        for name in sides:
            table.add_column(name, justify="right")
        rows = [
            key
            for key in next(iter(sides.values()))
            if key not in {"settings", "wal_records_per_task_by_type"}
        ]
        for key in rows:
            table.add_row(
                key, *("n/a" if side.get(key) is None else str(side.get(key)) for side in sides.values())
            )
        kinds = {kind for side in sides.values() for kind in side.get("wal_records_per_task_by_type", {})}
        for kind in sorted(kinds):
            table.add_row(
                f"WAL records per task: {kind}",
                *(str(side.get("wal_records_per_task_by_type", {}).get(kind, "")) for side in sides.values()),
            )
        console.print(table)
        for missing in self.hop_profile.get("missing", []):
            console.print(f"hop profile: not measured: {missing}")


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _load(value: Any) -> str:
    return f"{value[0]:.2f}" if value else "?"
