"""A comparable snapshot of one schema's catalog, and the differences between two snapshots.

The drift test compares "all migrations applied" with "schema files installed", and an upgrade audit
compares a live database with what this release expects; both need the same normalized view of the
catalog. Every entry is keyed by a stable name (never an OID) and described by plain JSON values
rendered by PostgreSQL itself (``format_type``, ``pg_get_constraintdef``, ``pg_get_indexdef``, ...),
under a fixed ``search_path`` so that names are qualified the same way on both sides.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

Snapshot = dict[str, dict[str, dict[str, Any]]]
"""category -> object key -> description."""


class Cursor(Protocol):
    """What the snapshot needs: a DB-API cursor (psycopg's or Django's) with ``%s`` parameters."""

    def execute(self, query: str, params: Any = ..., /) -> Any: ...

    def fetchall(self) -> Any: ...


# Each query takes the schema name as its only parameter and yields (key, description as jsonb text).
QUERIES: dict[str, str] = {
    "schema": """
        select n.nspname, jsonb_build_object(
                 'owner', pg_get_userbyid(n.nspowner),
                 'comment', obj_description(n.oid, 'pg_namespace'))::text
        from pg_namespace n where n.nspname = %s
    """,
    "relations": """
        select format('%%I.%%I', n.nspname, c.relname), jsonb_build_object(
                 'kind', c.relkind,
                 'persistence', c.relpersistence,
                 'options', c.reloptions,
                 'row_security', c.relrowsecurity,
                 'force_row_security', c.relforcerowsecurity,
                 'partition_bound', pg_get_expr(c.relpartbound, c.oid),
                 'partition_key', case when c.relkind = 'p' then pg_get_partkeydef(c.oid) end,
                 'inherits', (select array_agg(i.inhparent::regclass::text order by i.inhseqno)
                              from pg_inherits i where i.inhrelid = c.oid),
                 'comment', obj_description(c.oid, 'pg_class'))::text
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = %s and c.relkind in ('r', 'p', 'v', 'm', 'f')
    """,
    "columns": """
        select format('%%I.%%I.%%I', n.nspname, c.relname, a.attname), jsonb_build_object(
                 'position', row_number() over (partition by c.oid order by a.attnum),
                 'type', format_type(a.atttypid, a.atttypmod),
                 'not_null', a.attnotnull,
                 'default', pg_get_expr(d.adbin, d.adrelid),
                 'identity', a.attidentity,
                 'generated', a.attgenerated,
                 'collation', case when a.attcollation <> t.typcollation
                                   then a.attcollation::regcollation::text end,
                 'comment', col_description(c.oid, a.attnum))::text
        from pg_attribute a
        join pg_class c on c.oid = a.attrelid
        join pg_namespace n on n.oid = c.relnamespace
        join pg_type t on t.oid = a.atttypid
        left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where n.nspname = %s and c.relkind in ('r', 'p', 'v', 'm', 'f')
          and a.attnum > 0 and not a.attisdropped
    """,
    "constraints": """
        select format('%%I.%%I.%%I', n.nspname, coalesce(c.relname, t.typname), k.conname),
               jsonb_build_object(
                 'type', k.contype,
                 'definition', pg_get_constraintdef(k.oid),
                 'validated', k.convalidated,
                 'comment', obj_description(k.oid, 'pg_constraint'))::text
        from pg_constraint k
        join pg_namespace n on n.oid = k.connamespace
        left join pg_class c on c.oid = k.conrelid
        left join pg_type t on t.oid = k.contypid
        where n.nspname = %s
    """,
    "indexes": """
        select format('%%I.%%I', n.nspname, ic.relname), jsonb_build_object(
                 'table', format('%%I.%%I', n.nspname, tc.relname),
                 'definition', pg_get_indexdef(i.indexrelid),
                 'constraint', (select k.contype from pg_constraint k where k.conindid = i.indexrelid
                                  and k.conrelid = i.indrelid and k.contype in ('p', 'u', 'x')),
                 'comment', obj_description(ic.oid, 'pg_class'))::text
        from pg_index i
        join pg_class ic on ic.oid = i.indexrelid
        join pg_class tc on tc.oid = i.indrelid
        join pg_namespace n on n.oid = ic.relnamespace
        where n.nspname = %s
    """,
    "functions": """
        select format('%%I.%%I(%%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)),
               jsonb_build_object(
                 'kind', p.prokind,
                 'arguments', pg_get_function_arguments(p.oid),
                 'result', pg_get_function_result(p.oid),
                 'language', l.lanname,
                 'volatility', p.provolatile,
                 'strict', p.proisstrict,
                 'security_definer', p.prosecdef,
                 'leakproof', p.proleakproof,
                 'parallel', p.proparallel,
                 'cost', p.procost,
                 'rows', p.prorows,
                 'config', p.proconfig,
                 'source_md5', md5(p.prosrc),
                 'comment', obj_description(p.oid, 'pg_proc'))::text
        from pg_proc p
        join pg_namespace n on n.oid = p.pronamespace
        join pg_language l on l.oid = p.prolang
        where n.nspname = %s
    """,
    "triggers": """
        select format('%%I.%%I.%%I', n.nspname, c.relname, g.tgname), jsonb_build_object(
                 'definition', pg_get_triggerdef(g.oid),
                 'enabled', g.tgenabled,
                 'comment', obj_description(g.oid, 'pg_trigger'))::text
        from pg_trigger g
        join pg_class c on c.oid = g.tgrelid
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = %s and not g.tgisinternal
    """,
    "views": """
        select format('%%I.%%I', n.nspname, c.relname), jsonb_build_object(
                 'kind', c.relkind,
                 'definition', pg_get_viewdef(c.oid))::text
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = %s and c.relkind in ('v', 'm')
    """,
    "types": """
        select format('%%I.%%I', n.nspname, t.typname), jsonb_build_object(
                 'kind', t.typtype,
                 'attributes', (select jsonb_agg(jsonb_build_array(a.attname,
                                                                   format_type(a.atttypid, a.atttypmod))
                                                 order by a.attnum)
                                from pg_attribute a
                                where a.attrelid = t.typrelid and a.attnum > 0 and not a.attisdropped),
                 'labels', (select jsonb_agg(e.enumlabel order by e.enumsortorder)
                            from pg_enum e where e.enumtypid = t.oid),
                 'base_type', case when t.typtype = 'd' then format_type(t.typbasetype, t.typtypmod) end,
                 'not_null', t.typnotnull,
                 'default', t.typdefault,
                 'comment', obj_description(t.oid, 'pg_type'))::text
        from pg_type t join pg_namespace n on n.oid = t.typnamespace
        where n.nspname = %s
          and (t.typrelid = 0 or (select c.relkind from pg_class c where c.oid = t.typrelid) = 'c')
          and not exists (select 1 from pg_type e where e.typarray = t.oid)
    """,
    "sequences": """
        select format('%%I.%%I', n.nspname, c.relname), jsonb_build_object(
                 'type', format_type(s.seqtypid, null),
                 'start', s.seqstart,
                 'increment', s.seqincrement,
                 'min', s.seqmin,
                 'max', s.seqmax,
                 'cache', s.seqcache,
                 'cycle', s.seqcycle,
                 'owned_by', (select format('%%s.%%I', d.refobjid::regclass, a.attname)
                              from pg_depend d
                              join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
                              where d.classid = 'pg_class'::regclass and d.objid = c.oid
                                and d.deptype in ('a', 'i')))::text
        from pg_sequence s
        join pg_class c on c.oid = s.seqrelid
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = %s
    """,
    "policies": """
        select format('%%I.%%I.%%I', n.nspname, c.relname, p.polname), jsonb_build_object(
                 'command', p.polcmd,
                 'permissive', p.polpermissive,
                 'roles', (select array_agg(r::regrole::text order by r::regrole::text)
                           from unnest(p.polroles) r),
                 'using', pg_get_expr(p.polqual, p.polrelid),
                 'with_check', pg_get_expr(p.polwithcheck, p.polrelid))::text
        from pg_policy p
        join pg_class c on c.oid = p.polrelid
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = %s
    """,
}


def _fetch(cursor: Cursor, query: str, schema: str) -> dict[str, dict[str, Any]]:
    cursor.execute(query, [schema])
    return {key: json.loads(description) for key, description in sorted(cursor.fetchall())}


def snapshot(cursor: Cursor, schema: str = "pgflow") -> Snapshot:
    """Describe every object of ``schema``; the session's ``search_path`` is restored afterwards."""
    cursor.execute("select current_setting('search_path')", [])
    previous = cursor.fetchall()[0][0]
    cursor.execute("select set_config('search_path', 'pg_catalog', false)", [])
    try:
        return {category: _fetch(cursor, query, schema) for category, query in QUERIES.items()}
    finally:
        cursor.execute("select set_config('search_path', %s, false)", [previous])


def diff(expected: Snapshot, actual: Snapshot) -> list[str]:
    """Human-readable differences, one line each: missing, unexpected and changed objects."""
    lines: list[str] = []
    for category in sorted(set(expected) | set(actual)):
        want, have = expected.get(category, {}), actual.get(category, {})
        for key in sorted(set(want) | set(have)):
            if key not in have:
                lines.append(f"missing {category} {key}")
            elif key not in want:
                lines.append(f"unexpected {category} {key}")
            else:
                for field in sorted(set(want[key]) | set(have[key])):
                    if want[key].get(field) != have[key].get(field):
                        lines.append(
                            f"changed {category} {key}: {field} expected {want[key].get(field)!r}, "
                            f"found {have[key].get(field)!r}"
                        )
    return lines
