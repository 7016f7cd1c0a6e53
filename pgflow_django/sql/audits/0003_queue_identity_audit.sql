-- 0003_queue_identity_audit.sql: the read-only audit of migration 0003 (persisted queue identity).
--
-- Shared by the migration's preflight (run under the pgflow:migrate advisory lock and table locks,
-- before any change) and by `manage.py pgflow_audit` (run in a read-only transaction, before
-- upgrading). Each statement follows a `-- check: <name>` marker line (the comment lines after the
-- marker describe it, up to a bare '--' line) and returns exactly one row:
--   (check text, problem_count bigint, samples jsonb, hint text)
-- where samples is an array of at most 5 sample keys (JSON objects, message ids as strings) and
-- problem_count = 0 means the check passed. Only objects of the baseline release are used (pgflow
-- tables of migration 0002, pgmq.meta and the queue tables it names, pg_catalog), so the audit runs
-- on a database that does not have 0003's functions yet. Reading each flow's queue table needs
-- dynamic SQL inside a plain SELECT: ts_stat(query) runs a read-only query returning one tsvector
-- column and counts its lexemes, so a query yielding one lexeme per unmatched message gives their
-- count (ndoc) and, with the message id as the lexeme, sample ids. (query_to_xml would do the same
-- but needs a server built with libxml, which the embedded PostgreSQL lacks.)
-- Loaded by pgflow_django.upgrade; never edit it once released.

-- check: case_alias_queues
-- pgmq.meta rows whose names differ only in case: PGMQ lowercases table names, so both spellings
-- address the same queue and archive tables, and a queue name can no longer be resolved to one row.
with groups as (
  select lower(m.queue_name) as canonical,
         array_agg(m.queue_name::text order by m.queue_name) as spellings,
         min(f.flow_slug) as flow_slug
    from pgmq.meta as m
    left join pgflow.flows as f on f.flow_slug = m.queue_name
   group by lower(m.queue_name)
  having count(*) > 1
), sample as (
  select g.*,
         (select s from unnest(g.spellings) as s
           where s <> coalesce(g.flow_slug, g.canonical) order by s limit 1) as alias
    from groups as g
   order by g.canonical
   limit 5
)
select 'case_alias_queues' as check,
       (select count(*) from groups) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('queue_name', s.canonical, 'spellings', to_jsonb(s.spellings),
                                                     'flow_slug', s.flow_slug) order by s.canonical)
                   from sample as s), '[]'::jsonb) as samples,
       format('keep the spelling its flow uses and delete the other metadata row, e.g. '
              'delete from pgmq.meta where queue_name = %L (never pgmq.drop_queue an alias: it drops the '
              'tables both spellings share)',
              coalesce((select s.alias from sample as s order by s.canonical limit 1), '<alias>')) as hint;

-- check: missing_queue_objects
-- pgmq.meta rows whose queue table pgmq.q_<name>, archive table pgmq.a_<name> or the queue table's
-- msg_id sequence is missing (dropped by hand, or a half-finished create or drop).
with queues as (
  select m.queue_name::text as queue_name,
         (select c.oid from pg_class as c
           where c.relnamespace = 'pgmq'::regnamespace and c.relname = 'q_' || lower(m.queue_name)
             and c.relkind in ('r', 'p')) as q_table,
         (select c.oid from pg_class as c
           where c.relnamespace = 'pgmq'::regnamespace and c.relname = 'a_' || lower(m.queue_name)
             and c.relkind in ('r', 'p')) as a_table
    from pgmq.meta as m
), problems as (
  select q.queue_name,
         array_remove(array[
           case when q.q_table is null then format('queue table pgmq.%I', 'q_' || lower(q.queue_name)) end,
           case when q.a_table is null then format('archive table pgmq.%I', 'a_' || lower(q.queue_name)) end,
           case when q.q_table is not null and not exists (
                  select 1
                    from pg_depend as d
                    join pg_class as seq on seq.oid = d.objid and seq.relkind = 'S'
                    join pg_attribute as a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
                   where d.classid = 'pg_class'::regclass and d.refclassid = 'pg_class'::regclass
                     and d.refobjid = q.q_table and a.attname = 'msg_id' and d.deptype in ('a', 'i'))
                then format('msg_id sequence of pgmq.%I', 'q_' || lower(q.queue_name)) end
         ], null) as missing
    from queues as q
), found as (
  select * from problems as p where cardinality(p.missing) > 0
)
select 'missing_queue_objects' as check,
       (select count(*) from found) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('queue_name', s.queue_name, 'missing', to_jsonb(s.missing))
                                  order by s.queue_name)
                   from (select * from found order by queue_name limit 5) as s), '[]'::jsonb) as samples,
       format('recreate a missing table with select pgmq.create(%L) (it keeps what exists); a queue '
              'table without its sequence must be drained, dropped with pgmq.drop_queue and created again',
              coalesce((select f.queue_name from found as f order by f.queue_name limit 1), '<queue>')) as hint;

-- check: duplicate_message_identities
-- Tasks sharing one (queue, message id) identity, the queue being lower(flow_slug): after 0003 a
-- message belongs to at most one task. Usually left by a queue that was dropped and created again,
-- which restarted its message ids.
--
-- Exact flow slugs are grouped in the order of the (flow_slug, message_id) index, so the scan
-- streams instead of hashing every task; only flows whose slugs differ in case alone (rare) are
-- grouped by lower(flow_slug).
with colliding as (
  select lower(f.flow_slug) as queue_name
    from pgflow.flows as f
   group by lower(f.flow_slug)
  having count(*) > 1
), per_flow as (
  select t.flow_slug, t.message_id, count(*) as tasks
    from pgflow.step_tasks as t
   where t.message_id is not null
   group by t.flow_slug, t.message_id
  having count(*) > 1
), across_flows as (
  select lower(t.flow_slug) as queue_name, t.message_id, count(*) as tasks
    from pgflow.step_tasks as t
   where t.message_id is not null
     and t.flow_slug in (select f.flow_slug from pgflow.flows as f where lower(f.flow_slug) in (select queue_name from colliding))
   group by lower(t.flow_slug), t.message_id
  having count(*) > 1
), duplicates as (
  select lower(p.flow_slug) as queue_name, p.message_id, p.tasks
    from per_flow as p
   where lower(p.flow_slug) not in (select queue_name from colliding)
  union all
  select * from across_flows
)
select 'duplicate_message_identities' as check,
       (select count(*) from duplicates) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('queue_name', s.queue_name, 'message_id', s.message_id::text,
                                                     'tasks', s.tasks) order by s.queue_name, s.message_id)
                   from (select * from duplicates order by queue_name, message_id limit 5) as s),
                '[]'::jsonb) as samples,
       format('keep the message id on the live task only: prune finished runs (manage.py pgflow_prune) or '
              'set message_id = null on the finished tasks of queue %L that still hold it',
              coalesce((select d.queue_name from duplicates as d order by d.queue_name limit 1), '<queue>')) as hint;

-- check: unmatched_active_messages
-- Messages waiting in a flow's queue that no task of that flow (lower(flow_slug) = queue) claims by
-- message id: sent by something other than pgflow. The new claim treats a pgflow-shaped one as
-- fatal and pauses the flow's workers, so they must be dealt with before upgrading.
--
-- Each message is matched through an index: (flow_slug, message_id) before the upgrade, and the
-- task's queue snapshot (queue_name, message_id) once step_tasks has one.
with queues as (
  select lower(m.queue_name) as queue_name,
         array_agg(distinct f.flow_slug::text) as flow_slugs
    from pgmq.meta as m
    join pgflow.flows as f on lower(f.flow_slug) = lower(m.queue_name)
   group by lower(m.queue_name)
), readable as (
  select q.*,
         case when exists (select 1 from pg_attribute as a
                            where a.attrelid = 'pgflow.step_tasks'::regclass and a.attname = 'queue_name'
                              and not a.attisdropped)
              then format('t.queue_name = %L', q.queue_name)
              else format('t.flow_slug = any(%L::text[])', q.flow_slugs)
         end as task_of_queue
    from queues as q
    join pg_class as c on c.relnamespace = 'pgmq'::regnamespace and c.relname = 'q_' || q.queue_name
                      and c.relkind in ('r', 'p')
    join pg_attribute as a on a.attrelid = c.oid and a.attname = 'msg_id' and not a.attisdropped
), unmatched as (
  select r.queue_name,
         format(' from pgmq.%I as m where not exists ('
                'select 1 from pgflow.step_tasks as t where %s and t.message_id = m.msg_id)',
                'q_' || r.queue_name, r.task_of_queue) as from_clause
    from readable as r
), per_queue as (
  select u.queue_name,
         (select coalesce(sum(w.ndoc), 0)
            from ts_stat('select ''unmatched''::tsvector' || u.from_clause) as w) as unmatched,
         (select array_agg(w.word order by w.word::bigint)
            from ts_stat('select m.msg_id::text::tsvector' || u.from_clause || ' order by m.msg_id limit 5') as w) as ids
    from unmatched as u
), sample as (
  select p.queue_name, i.id
    from per_queue as p
    cross join lateral unnest(p.ids) as i (id)
   order by p.queue_name, i.id::bigint
   limit 5
)
select 'unmatched_active_messages' as check,
       coalesce((select sum(p.unmatched) from per_queue as p), 0)::bigint as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('queue_name', s.queue_name, 'message_id', s.id)
                                  order by s.queue_name, s.id::bigint)
                   from sample as s), '[]'::jsonb) as samples,
       format('find out who sent it (applications must not send to pgflow''s queues), then archive it: '
              'select pgmq.archive(%L, %s::bigint) (or pgmq.delete)',
              coalesce((select s.queue_name from sample as s order by s.queue_name, s.id::bigint limit 1), '<queue>'),
              coalesce((select s.id from sample as s order by s.queue_name, s.id::bigint limit 1), '<message id>')) as hint;

-- check: flows_without_default_queue
-- Flows that do not have exactly one PGMQ queue whose name is lower(flow_slug) in any case, with its
-- queue and archive tables: 0003 records that queue on every step and task.
with flow_queues as (
  select f.flow_slug,
         array_agg(m.queue_name::text order by m.queue_name) filter (where m.queue_name is not null) as spellings
    from pgflow.flows as f
    left join pgmq.meta as m on lower(m.queue_name) = lower(f.flow_slug)
   group by f.flow_slug
), found as (
  select fq.flow_slug,
         case
           when fq.spellings is null then format('no PGMQ queue named %s', lower(fq.flow_slug))
           when cardinality(fq.spellings) > 1 then format('ambiguous queue: %s', array_to_string(fq.spellings, ', '))
           when to_regclass(format('pgmq.%I', 'q_' || lower(fq.flow_slug))) is null
             or to_regclass(format('pgmq.%I', 'a_' || lower(fq.flow_slug))) is null
             then format('queue %s lacks its queue or archive table', fq.spellings[1])
         end as problem
    from flow_queues as fq
)
select 'flows_without_default_queue' as check,
       (select count(*) from found where problem is not null) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('flow_slug', s.flow_slug, 'problem', s.problem)
                                  order by s.flow_slug)
                   from (select * from found where problem is not null order by flow_slug limit 5) as s),
                '[]'::jsonb) as samples,
       format('give the flow one queue: select pgflow.create_flow(%L) creates a missing one; remove an alias '
              'as case_alias_queues says; or delete an unused flow with manage.py pgflow_delete_flow',
              coalesce((select f.flow_slug from found as f where f.problem is not null order by f.flow_slug limit 1),
                       '<flow>')) as hint;

-- check: queue_names_of_another_flow
-- Flows whose default queue name lower(flow_slug) is also another flow's: their tasks would share
-- one queue and one message id sequence.
with groups as (
  select lower(f.flow_slug) as queue_name, array_agg(f.flow_slug::text order by f.flow_slug) as flow_slugs
    from pgflow.flows as f
   group by lower(f.flow_slug)
  having count(*) > 1
)
select 'queue_names_of_another_flow' as check,
       (select count(*) from groups) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('queue_name', s.queue_name, 'flow_slugs', to_jsonb(s.flow_slugs))
                                  order by s.queue_name)
                   from (select * from groups order by queue_name limit 5) as s), '[]'::jsonb) as samples,
       format('keep one flow per queue name: drain the other flows of queue %L, compile them under new slugs '
              'and delete the old ones with manage.py pgflow_delete_flow',
              coalesce((select g.queue_name from groups as g order by g.queue_name limit 1), '<queue>')) as hint;

-- check: invalid_flow_slugs
-- Flow slugs the new slug rules reject: a leading or trailing underscore, or '__' ('__' is reserved
-- for generated queue names); the rules of the baseline release (letters, digits, underscores, no
-- leading digit, at most 128 characters, not 'run') are checked again too.
with found as (
  select f.flow_slug,
         concat_ws(', ',
           case when f.flow_slug ~ '^_' then 'leading underscore' end,
           case when f.flow_slug ~ '_$' then 'trailing underscore' end,
           case when position('__' in f.flow_slug) > 0 then 'double underscore' end,
           case when f.flow_slug !~ '^[A-Za-z_][A-Za-z0-9_]*$' then 'characters other than letters, digits and underscores, or a leading digit' end,
           case when length(f.flow_slug) not between 1 and 128 then 'not 1 to 128 characters' end,
           case when lower(f.flow_slug) = 'run' then 'reserved word' end) as reason
    from pgflow.flows as f
)
select 'invalid_flow_slugs' as check,
       (select count(*) from found where reason <> '') as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('flow_slug', s.flow_slug, 'reason', s.reason) order by s.flow_slug)
                   from (select * from found where reason <> '' order by flow_slug limit 5) as s),
                '[]'::jsonb) as samples,
       format('rename the flow: compile it under a valid new slug, let %L drain, then delete it with '
              'manage.py pgflow_delete_flow',
              coalesce((select f.flow_slug from found as f where f.reason <> '' order by f.flow_slug limit 1),
                       '<flow>')) as hint;

-- check: invalid_step_slugs
-- Step slugs the new slug rules reject (the same rules as flow slugs).
with found as (
  select s.flow_slug, s.step_slug,
         concat_ws(', ',
           case when s.step_slug ~ '^_' then 'leading underscore' end,
           case when s.step_slug ~ '_$' then 'trailing underscore' end,
           case when position('__' in s.step_slug) > 0 then 'double underscore' end,
           case when s.step_slug !~ '^[A-Za-z_][A-Za-z0-9_]*$' then 'characters other than letters, digits and underscores, or a leading digit' end,
           case when length(s.step_slug) not between 1 and 128 then 'not 1 to 128 characters' end,
           case when lower(s.step_slug) = 'run' then 'reserved word' end) as reason
    from pgflow.steps as s
)
select 'invalid_step_slugs' as check,
       (select count(*) from found where reason <> '') as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('flow_slug', s.flow_slug, 'step_slug', s.step_slug,
                                                     'reason', s.reason) order by s.flow_slug, s.step_slug)
                   from (select * from found where reason <> '' order by flow_slug, step_slug limit 5) as s),
                '[]'::jsonb) as samples,
       format('rename the step: compile flow %L under a new slug with the step renamed, let the old flow '
              'drain, then delete it with manage.py pgflow_delete_flow',
              coalesce((select f.flow_slug from found as f where f.reason <> '' order by f.flow_slug, f.step_slug limit 1),
                       '<flow>')) as hint;

-- check: case_duplicate_flow_slugs
-- Flow slugs that differ only in case ('Orders' and 'orders'): refused from 0003 on, because queue
-- names are lowercase.
with groups as (
  select array_agg(f.flow_slug::text order by f.flow_slug) as flow_slugs
    from pgflow.flows as f
   group by lower(f.flow_slug)
  having count(*) > 1
)
select 'case_duplicate_flow_slugs' as check,
       (select count(*) from groups) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('flow_slugs', to_jsonb(s.flow_slugs)) order by s.flow_slugs)
                   from (select * from groups order by flow_slugs limit 5) as s), '[]'::jsonb) as samples,
       format('rename the flow: compile %L under a new slug, let it drain, then delete it with '
              'manage.py pgflow_delete_flow',
              coalesce((select g.flow_slugs[1] from groups as g order by g.flow_slugs limit 1), '<flow>')) as hint;

-- check: case_duplicate_step_slugs
-- Steps of one flow whose slugs differ only in case ('Charge' and 'charge'): refused from 0003 on.
with groups as (
  select s.flow_slug, array_agg(s.step_slug::text order by s.step_slug) as step_slugs
    from pgflow.steps as s
   group by s.flow_slug, lower(s.step_slug)
  having count(*) > 1
)
select 'case_duplicate_step_slugs' as check,
       (select count(*) from groups) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('flow_slug', s.flow_slug, 'step_slugs', to_jsonb(s.step_slugs))
                                  order by s.flow_slug, s.step_slugs)
                   from (select * from groups order by flow_slug, step_slugs limit 5) as s), '[]'::jsonb) as samples,
       format('rename the step: compile flow %L under a new slug with distinct step slugs, let the old flow '
              'drain, then delete it with manage.py pgflow_delete_flow',
              coalesce((select g.flow_slug from groups as g order by g.flow_slug limit 1), '<flow>')) as hint;
