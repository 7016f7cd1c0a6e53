-- 0007_squashed_0038: the deltas 0007_task_backend to 0038_worker_support_queue as one, written by
-- `python -m pgflow_django.sql.squash 0007 0038 0007_squashed_0038`: their statements in the order a rollback runs them,
-- without those a later definition of the same function made redundant. Never edit it once
-- released.
-- Squashed: 0007_task_backend, 0008_fast_paths, 0009_shape_safety, 0010_pgflow_fidelity,
-- 0011_lock_order, 0012_poison_paths, 0013_transition_times, 0014_schedules, 0015_consolidation,
-- 0016_observability, 0017_admin_console, 0018_hot_path, 0019_hand_off, 0020_priorities,
-- 0021_concurrency_limits, 0022_partitioned_history, 0023_one_home, 0024_batch_joins,
-- 0025_batch_probes, 0026_completion_probe, 0027_key_only_probes, 0028_wake_after_claims,
-- 0029_hot_path_without_jit, 0030_limit_wakeups, 0031_queue_access, 0032_archive_partitions,
-- 0033_limit_wake_locked_messages, 0034_queue_provisioning, 0035_schedule_catch_up,
-- 0036_return_unstarted_tasks, 0037_schedule_isolation, 0038_worker_support_queue.

-- ---------------------------------------------------------------- 0038_worker_support_queue_down.sql
-- Frozen migration delta 0038_worker_support_queue, down: pgflow.worker_support without queue_name
-- (a worker polling several queues is then counted on none of them until it stops).

-- 0135_table_worker_support.sql
alter table pgflow.worker_support drop column queue_name;

-- ---------------------------------------------------------------- 0037_schedule_isolation_down.sql
-- 0455_function_plan_schedules.sql
-- Stores planned ticks computed by Python (cron arithmetic, time zones and DST stay in one place):
-- `plans` is a JSON array of {"schedule": name, "revision": n, "ticks": [timestamps], "planned_until": t}.
-- Ticks are merged into `upcoming` (sorted, without duplicates, none at or before the last fired
-- tick) and next_fire_at is recomputed. A plan made for another revision of the definition (the
-- schedule was edited meanwhile) is ignored. Returns the names of the schedules updated.
create or replace function pgflow.plan_schedules(plans jsonb)
returns setof text
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if plans is null or jsonb_typeof(plans) <> 'array' then
    raise exception 'plan_schedules: plans must be a JSON array of {"schedule", "revision", "ticks", "planned_until"}'
      using errcode = '22023';
  end if;
  return query
    with p as (
      select e.value ->> 'schedule' as name, (e.value ->> 'revision')::bigint as revision,
             array(select t::timestamptz from jsonb_array_elements_text(e.value -> 'ticks') as t) as ticks,
             (e.value ->> 'planned_until')::timestamptz as planned_until
        from jsonb_array_elements(plans) as e(value)
    ), merged as (
      select s.schedule_name, p.planned_until,
             coalesce(array(select distinct u.tick from unnest(s.upcoming || p.ticks) as u(tick)
                             where s.last_tick is null or u.tick > s.last_tick
                             order by u.tick), '{}') as upcoming
        from pgflow.schedules as s
        join p on p.name = s.schedule_name and p.revision = s.revision
    )
    update pgflow.schedules as s
       set upcoming = m.upcoming,
           planned_until = greatest(s.planned_until, m.planned_until),
           next_fire_at = pgflow.schedule_next_fire_at(s.schedule_name, m.upcoming, s.jitter_seconds)
      from merged as m
     where s.schedule_name = m.schedule_name
    returning s.schedule_name;
end;
$$;
-- 0180_table_schedules.sql
alter table pgflow.schedules drop column plan_error, drop column plan_failed_at;

-- ---------------------------------------------------------------- 0036_return_unstarted_tasks_down.sql
-- Frozen migration delta 0036_return_unstarted_tasks, down: no pgflow.return_unstarted_tasks.

drop function if exists pgflow.return_unstarted_tasks(jsonb);

-- ---------------------------------------------------------------- 0035_schedule_catch_up_down.sql
-- Frozen migration delta 0035_schedule_catch_up, down: pgflow.due_schedule_names as 0014 left it.

-- 0453_function_due_schedule_names.sql
-- The schedules due at `now`, earliest first, at most max_schedules: enabled, not paused, with a
-- planned tick whose fire time has come. Schedules whose input is a Python callable are included
-- only when `with_callables` (the Python scheduler, which evaluates them; pg_cron cannot).
create or replace function pgflow.due_schedule_names(now timestamptz, max_schedules integer, with_callables boolean)
returns text[]
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  select coalesce(array_agg(d.schedule_name order by d.next_fire_at, d.schedule_name), '{}')
    from (select s.schedule_name, s.next_fire_at
            from pgflow.schedules as s
           where s.enabled and s.paused_reason is null and s.next_fire_at <= due_schedule_names.now
             and (with_callables or s.input_callable is null)
           order by s.next_fire_at, s.schedule_name
           limit max_schedules) as d
$$;

-- ---------------------------------------------------------------- 0034_queue_provisioning_down.sql
-- Frozen migration delta 0034_queue_provisioning, down: pgflow.write_queue_access as 0032 left it,
-- run once so that pgflow.queue_access holds a branch per queue again; then the numbered functions
-- pgflow.queue_access_NNN and pgflow.queue_access_dynamic, no longer called, are dropped.

-- 0198_function_write_queue_access.sql
-- Writes pgflow.queue_access, the one way the engine sends, archives, hides and looks at the head of
-- a queue's messages, with a branch of static SQL for each of pgflow's queues (pgflow.engine_queues,
-- and provisioning: a queue being created in this transaction, before the row that names it). PGMQ
-- builds these statements as dynamic SQL, planned again on every call, which costs three to eight
-- times as much as running the planned statement for one message; a static statement is planned
-- once per session. A queue without a branch (one created
-- after the last write, or whose tables are not PGMQ's layout) goes through the dynamic statements
-- at the end of the function, so a branch is an optimisation and never the only way to a queue.
-- A queue gets a branch when its table and archive have PGMQ's layout: the columns below with these
-- types and a generated message id, as PGMQ 1.11 to 1.13 create them. Called where pgflow creates
-- or drops a queue and by every worker at start-up, so a PGMQ upgrade that changes the tables is
-- seen before the first claim. The function is replaced only when its text changes: no DDL, so no
-- invalidated plans in other sessions, when nothing did. Returns the queues that have a branch.
-- Writers take one advisory lock until they commit, so each sees the queues of those before it.
-- Calls inside a longer transaction (creating or dropping queues) pass wait => false: they hold
-- other locks (PGMQ's queue locks among them), and waiting for this one while its holder waits for
-- one of theirs would deadlock; such a call writes nothing and returns NULL when the lock is taken,
-- and the queue gets its branch at the next write, at the latest when a worker for it starts.
create or replace function pgflow.write_queue_access(provisioning text = null, wait boolean = true)
returns text[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_branches text;
  v_source text;
begin
  if wait then
    perform pg_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0));
  elsif not pg_try_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0)) then
    return null;
  end if;

  select coalesce(array_agg(q.queue_name order by q.queue_name), '{}') into v_queues
    from (select e.queue_name from pgflow.engine_queues() as e(queue_name)
          union
          select lower(provisioning) where provisioning is not null) as q
   where (select count(*)
            from (values ('q'), ('a')) as t(kind)
            cross join (values ('msg_id', 'bigint'::regtype), ('read_ct', 'integer'),
                               ('enqueued_at', 'timestamptz'), ('last_read_at', 'timestamptz'),
                               ('vt', 'timestamptz'), ('message', 'jsonb'), ('headers', 'jsonb'))
                         as want(column_name, column_type)
            join pg_attribute as a
              on a.attrelid = to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, t.kind)))
             and a.attname = want.column_name and a.atttypid = want.column_type and not a.attisdropped) = 14
     and exists (select 1 from pg_attribute as a
                  where a.attrelid = to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, 'q')))
                    and a.attname = 'msg_id' and (a.attidentity <> '' or a.atthasdef));

  select coalesce(string_agg(format($branch$
  if v_queue = %1$L then
    if op = 'send' then
      return query
        insert into pgmq.%2$I as q (vt, message, headers)
        select clock_timestamp() + make_interval(secs => coalesce(numbers[1], 0)), m.message, m.headers
          from rows from (unnest(messages), unnest(headers)) with ordinality as m(message, headers, n)
         order by m.n
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'archive' then
      return query
        with archived as (
          delete from pgmq.%2$I as q where q.msg_id = any(msg_ids)
          returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
        )
        insert into pgmq.%3$I as a (msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers)
        select d.msg_id, d.read_ct, d.enqueued_at, d.last_read_at, d.vt, d.message, d.headers from archived as d
        returning a.msg_id, a.read_ct, a.enqueued_at, a.last_read_at, a.vt, a.message, a.headers;
    elsif op in ('set', 'extend') then
      return query
        update pgmq.%2$I as q
           set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
          from unnest(msg_ids, numbers) as o(msg_id, vt_offset)
         where q.msg_id = o.msg_id
           and (op = 'set' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'head' then
      return query
        select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
          from pgmq.%2$I as q
         where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
         order by pgflow.message_priority(q.headers) desc, q.msg_id
         limit 1;
    end if;
    return;
  end if;$branch$,
      q.queue_name, pgmq.format_table_name(q.queue_name, 'q'), pgmq.format_table_name(q.queue_name, 'a')),
      '' order by q.queue_name), '')
    into v_branches
    from unnest(v_queues) as q(queue_name);

  v_source := format($body$
-- written by pgflow.write_queue_access(): a branch for each of %1$s
declare
  v_queue constant text := lower(queue_name);
begin
  if op is null or op not in ('send', 'archive', 'set', 'extend', 'head') then
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %%',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
%2$s
  if op = 'send' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.send_batch(queue_name, messages, headers, coalesce(numbers[1], 0)) as m(msg_id);
  elsif op = 'archive' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.archive(queue_name, msg_ids) as m(msg_id);
  elsif op in ('set', 'extend') then
    return query execute format(
      'update pgmq.%%I as q
          set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
         from unnest($1, $2) as o(msg_id, vt_offset)
        where q.msg_id = o.msg_id
          and ($3 = ''set'' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
       returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers',
      pgmq.format_table_name(queue_name, 'q')) using msg_ids, numbers, op;
  else
    return query execute format(
      'select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
         from pgmq.%%I as q
        where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
        order by pgflow.message_priority(q.headers) desc, q.msg_id
        limit 1',
      pgmq.format_table_name(queue_name, 'q'));
  end if;
end;
$body$,
    case when cardinality(v_queues) = 0 then 'no queue yet'
         else 'queue ' || array_to_string(v_queues, ', ') end,
    v_branches);

  if v_source is distinct from (select p.prosrc from pg_proc as p
                                 where p.oid = to_regprocedure(
                                   'pgflow.queue_access(text,text,bigint[],integer[],jsonb[],jsonb[])')) then
    execute format($create$
      create or replace function pgflow.queue_access(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                                     messages jsonb[], headers jsonb[])
      returns setof pgmq.message_record
      language plpgsql set search_path = pg_catalog, pgflow, pgmq
      as %L
    $create$, v_source);
    comment on function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]) is
      'One queue operation (op): send messages with headers, visible after numbers[1] seconds (ids in message order); archive msg_ids; set (or extend) the visibility of msg_ids to numbers[i] seconds from now; head: the visible message a claim takes first, among those sent before this statement. Written by pgflow.write_queue_access().';
  end if;
  return v_queues;
end;
$$;
select pgflow.write_queue_access();
do $$
declare
  v_function regprocedure;
begin
  for v_function in
    select p.oid::regprocedure from pg_proc as p
     where p.pronamespace = 'pgflow'::regnamespace and p.proname ~ '^queue_access_[0-9]{3}$'
     order by 1
  loop
    execute format('drop function %s', v_function);
  end loop;
end
$$;
drop function pgflow.queue_access_dynamic(text, text, bigint[], integer[], jsonb[], jsonb[]);

-- ---------------------------------------------------------------- 0033_limit_wake_locked_messages_down.sql
drop function if exists pgflow.lock_waiting_messages(text, bigint[]);

-- ---------------------------------------------------------------- 0032_archive_partitions_down.sql
-- Frozen migration delta 0032_archive_partitions, down: the functions as 0031 left them, without the archive
-- partitioning functions and pgflow.history_partitioning.archives. Archives already partitioned
-- stay partitioned (PGMQ's statements and retention by DELETE work on them).

-- 0198_function_write_queue_access.sql
-- Writes pgflow.queue_access, the one way the engine sends, archives, hides and looks at the head of
-- a queue's messages, with a branch of static SQL for each of pgflow's queues (plain flows' default
-- queues, the steps' queues, the declared shared queues, and provisioning: a queue being created in
-- this transaction, before the row that names it). PGMQ builds these statements as dynamic SQL, planned again
-- on every call, which costs three to eight times as much as running the planned statement for one
-- message; a static statement is planned once per session. A queue without a branch (one created
-- after the last write, or whose tables are not PGMQ's layout) goes through the dynamic statements
-- at the end of the function, so a branch is an optimisation and never the only way to a queue.
-- A queue gets a branch when its table and archive have PGMQ's layout: the columns below with these
-- types and a generated message id, as PGMQ 1.11 to 1.13 create them. Called where pgflow creates
-- or drops a queue and by every worker at start-up, so a PGMQ upgrade that changes the tables is
-- seen before the first claim. The function is replaced only when its text changes: no DDL, so no
-- invalidated plans in other sessions, when nothing did. Returns the queues that have a branch.
-- Writers take one advisory lock until they commit, so each sees the queues of those before it.
-- Calls inside a longer transaction (creating or dropping queues) pass wait => false: they hold
-- other locks (PGMQ's queue locks among them), and waiting for this one while its holder waits for
-- one of theirs would deadlock; such a call writes nothing and returns NULL when the lock is taken,
-- and the queue gets its branch at the next write, at the latest when a worker for it starts.
create or replace function pgflow.write_queue_access(provisioning text = null, wait boolean = true)
returns text[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_branches text;
  v_source text;
begin
  if wait then
    perform pg_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0));
  elsif not pg_try_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0)) then
    return null;
  end if;

  select coalesce(array_agg(q.queue_name order by q.queue_name), '{}') into v_queues
    from (select s.queue_name from pgflow.steps as s
          union
          select lower(f.flow_slug) from pgflow.flows as f where f.queue_mode = 'flow'
          union
          select sq.queue_name from pgflow.shared_queues as sq
          union
          select lower(provisioning) where provisioning is not null) as q
   where (select count(*)
            from (values ('q'), ('a')) as t(kind)
            cross join (values ('msg_id', 'bigint'::regtype), ('read_ct', 'integer'),
                               ('enqueued_at', 'timestamptz'), ('last_read_at', 'timestamptz'),
                               ('vt', 'timestamptz'), ('message', 'jsonb'), ('headers', 'jsonb'))
                         as want(column_name, column_type)
            join pg_attribute as a
              on a.attrelid = to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, t.kind)))
             and a.attname = want.column_name and a.atttypid = want.column_type and not a.attisdropped) = 14
     and exists (select 1 from pg_attribute as a
                  where a.attrelid = to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, 'q')))
                    and a.attname = 'msg_id' and (a.attidentity <> '' or a.atthasdef));

  select coalesce(string_agg(format($branch$
  if v_queue = %1$L then
    if op = 'send' then
      return query
        insert into pgmq.%2$I as q (vt, message, headers)
        select clock_timestamp() + make_interval(secs => coalesce(numbers[1], 0)), m.message, m.headers
          from rows from (unnest(messages), unnest(headers)) with ordinality as m(message, headers, n)
         order by m.n
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'archive' then
      return query
        with archived as (
          delete from pgmq.%2$I as q where q.msg_id = any(msg_ids)
          returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
        )
        insert into pgmq.%3$I as a (msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers)
        select d.msg_id, d.read_ct, d.enqueued_at, d.last_read_at, d.vt, d.message, d.headers from archived as d
        returning a.msg_id, a.read_ct, a.enqueued_at, a.last_read_at, a.vt, a.message, a.headers;
    elsif op in ('set', 'extend') then
      return query
        update pgmq.%2$I as q
           set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
          from unnest(msg_ids, numbers) as o(msg_id, vt_offset)
         where q.msg_id = o.msg_id
           and (op = 'set' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'head' then
      return query
        select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
          from pgmq.%2$I as q
         where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
         order by pgflow.message_priority(q.headers) desc, q.msg_id
         limit 1;
    end if;
    return;
  end if;$branch$,
      q.queue_name, pgmq.format_table_name(q.queue_name, 'q'), pgmq.format_table_name(q.queue_name, 'a')),
      '' order by q.queue_name), '')
    into v_branches
    from unnest(v_queues) as q(queue_name);

  v_source := format($body$
-- written by pgflow.write_queue_access(): a branch for each of %1$s
declare
  v_queue constant text := lower(queue_name);
begin
  if op is null or op not in ('send', 'archive', 'set', 'extend', 'head') then
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %%',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
%2$s
  if op = 'send' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.send_batch(queue_name, messages, headers, coalesce(numbers[1], 0)) as m(msg_id);
  elsif op = 'archive' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.archive(queue_name, msg_ids) as m(msg_id);
  elsif op in ('set', 'extend') then
    return query execute format(
      'update pgmq.%%I as q
          set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
         from unnest($1, $2) as o(msg_id, vt_offset)
        where q.msg_id = o.msg_id
          and ($3 = ''set'' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
       returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers',
      pgmq.format_table_name(queue_name, 'q')) using msg_ids, numbers, op;
  else
    return query execute format(
      'select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
         from pgmq.%%I as q
        where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
        order by pgflow.message_priority(q.headers) desc, q.msg_id
        limit 1',
      pgmq.format_table_name(queue_name, 'q'));
  end if;
end;
$body$,
    case when cardinality(v_queues) = 0 then 'no queue yet'
         else 'queue ' || array_to_string(v_queues, ', ') end,
    v_branches);

  if v_source is distinct from (select p.prosrc from pg_proc as p
                                 where p.oid = to_regprocedure(
                                   'pgflow.queue_access(text,text,bigint[],integer[],jsonb[],jsonb[])')) then
    execute format($create$
      create or replace function pgflow.queue_access(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                                     messages jsonb[], headers jsonb[])
      returns setof pgmq.message_record
      language plpgsql set search_path = pg_catalog, pgflow, pgmq
      as %L
    $create$, v_source);
    comment on function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]) is
      'One queue operation (op): send messages with headers, visible after numbers[1] seconds (ids in message order); archive msg_ids; set (or extend) the visibility of msg_ids to numbers[i] seconds from now; head: the visible message a claim takes first, among those sent before this statement. Written by pgflow.write_queue_access().';
  end if;
  return v_queues;
end;
$$;
-- 0365_function_prune_shared_archive.sql
-- Queue-wide retention of one declared shared queue's archive: deletes its archived messages older
-- than now - retention, whichever flow they belonged to. Returns how many were deleted.
create or replace function pgflow.prune_shared_archive(queue_name text, retention interval)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_count bigint;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_shared_archive: retention must be a non-negative interval' using errcode = '22023';
  end if;
  if not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = prune_shared_archive.queue_name) then
    raise exception 'queue % is not a shared queue declared by pgflow (shared queues: %)',
      quote_literal(coalesce(queue_name, 'NULL')),
      coalesce((select string_agg(sq.queue_name, ', ' order by sq.queue_name) from pgflow.shared_queues as sq), 'none')
      using errcode = '22023';
  end if;
  execute format('delete from pgmq.%I where archived_at < $1', pgmq.format_table_name(queue_name, 'a'))
    using now() - retention;
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;
-- 0470_function_partition_history.sql
-- Partitions runs, step_states and step_tasks by run id (range partitions of time-ordered UUIDv7
-- ids, one per `partition_interval`, `ahead` of them kept ready), opt-in for an existing install.
-- No row is copied: each current table becomes its new parent's DEFAULT partition (renamed
-- <table>_default, its indexes <table>_default_*), so the conversion is catalog work under a short
-- ACCESS EXCLUSIVE lock, and run ids that are not time-ordered (idempotency keys' UUIDv5, chosen
-- ids, ids made before UUIDv7) keep living there. The parents get the primary keys, the foreign keys
-- to the definition tables and the plain indexes; unique indexes without run_id stay per partition.
-- Foreign keys between the three tables are per partition (siblings share their range), so a
-- partition is dropped without checking the others; runs.rerun_of keeps no foreign key (a rerun is
-- younger than its original), and pruning clears it as ON DELETE SET NULL did. Functions returning
-- rows of the tables are redefined on the new parents, and the others naming them are touched so that
-- open sessions compile them again (a compiled function keeps the row types it saw). Returns the statements in order; runs them
-- only when `apply` (otherwise it changes nothing: the plan pgflow_partition prints).
create or replace function pgflow.partition_history(partition_interval interval, ahead integer, apply boolean)
returns setof text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_steps text[] := array['lock table pgflow.runs, pgflow.step_states, pgflow.step_tasks in access exclusive mode'];
  v_later text[] := '{}';
  v_table text;
  v_row record;
  v_step text;
begin
  if exists (select 1 from pgflow.history_partitioning) or
     exists (select 1 from pg_class as c where c.oid = 'pgflow.runs'::regclass and c.relkind = 'p') then
    raise exception 'the pgflow history is already partitioned (pgflow.history_partitioning has its settings)'
      using errcode = '55000';
  end if;
  if partition_interval is null or partition_interval < interval '1 day' or partition_interval > interval '31 days'
     or date_trunc('day', partition_interval) <> partition_interval or extract(month from partition_interval) <> 0 then
    raise exception 'partition interval must be whole days from 1 to 31, got %', coalesce(partition_interval::text, 'NULL')
      using errcode = '22023';
  end if;
  if ahead is null or ahead not between 1 and 60 then
    raise exception 'ahead must be from 1 to 60 partitions, got %', coalesce(ahead::text, 'NULL') using errcode = '22023';
  end if;

  -- functions returning rows of a history table: dropped before the swap, defined again after it
  for v_row in
    select p.oid::regprocedure::text as signature, pg_get_functiondef(p.oid) as def
      from pg_proc as p
     where p.pronamespace = 'pgflow'::regnamespace and p.prorettype in (select c.reltype from pg_class as c
                             where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass))
     order by p.oid
  loop
    v_steps := v_steps || format('drop function pgflow.%s', v_row.signature);
    v_later := v_later || v_row.def;
  end loop;

  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format('alter table pgflow.%I rename to %I', v_table, v_table || '_default');
    for v_row in
      select c.relname from pg_index as i join pg_class as c on c.oid = i.indexrelid
       where i.indrelid = format('pgflow.%I', v_table)::regclass order by c.relname
    loop
      v_steps := v_steps || format('alter index pgflow.%I rename to %I', v_row.relname,
        case when left(v_row.relname, length(v_table) + 1) = v_table || '_'
             then v_table || '_default_' || substr(v_row.relname, length(v_table) + 2)
             else v_row.relname || '_default' end);
    end loop;
  end loop;
  v_steps := v_steps || 'alter table pgflow.runs_default drop constraint runs_rerun_of_fkey'::text;

  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format(
      'create table pgflow.%I (like pgflow.%I including defaults including constraints including comments) partition by range (run_id)',
      v_table, v_table || '_default');
    for v_row in
      select con.conname, pg_get_constraintdef(con.oid) as def from pg_constraint as con
       where con.conrelid = format('pgflow.%I', v_table)::regclass
         and (con.contype = 'p'
              or (con.contype = 'f' and con.confrelid not in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                              'pgflow.step_tasks'::regclass)))
       order by con.contype desc, con.conname
    loop
      v_steps := v_steps || format('alter table pgflow.%I add constraint %I %s', v_table, v_row.conname, v_row.def);
    end loop;
    for v_row in
      select pg_get_indexdef(i.indexrelid) as def from pg_index as i
       where i.indrelid = format('pgflow.%I', v_table)::regclass and not i.indisprimary
         and (not i.indisunique or exists (select 1 from pg_attribute as a
                                            where a.attrelid = i.indrelid and a.attname = 'run_id'
                                              and a.attnum = any(i.indkey)))
       order by i.indexrelid
    loop
      v_steps := v_steps || v_row.def;
    end loop;
  end loop;
  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format('alter table pgflow.%I attach partition pgflow.%I default', v_table, v_table || '_default');
  end loop;
  v_steps := v_steps || v_later;
  -- a session keeps a PL/pgSQL function compiled with the row types it saw: touching each function
  -- that names a history table makes every session compile it again against the new parents
  for v_row in
    select p.oid::regprocedure::text as signature from pg_proc as p join pg_language as l on l.oid = p.prolang
     where p.pronamespace = 'pgflow'::regnamespace and l.lanname = 'plpgsql'
       and p.prorettype not in (select c.reltype from pg_class as c
                                 where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                 'pgflow.step_tasks'::regclass))
       and p.prosrc ~ 'pgflow\.(runs|step_states|step_tasks)\M'
     order by p.oid
  loop
    v_steps := v_steps || format('alter function pgflow.%s set search_path = pg_catalog, pgflow, pgmq', v_row.signature);
  end loop;
  v_steps := v_steps || format('insert into pgflow.history_partitioning (partition_interval, ahead) values (%L, %s)',
                               partition_interval, ahead);
  v_steps := v_steps || 'select pgflow.create_history_partitions()'::text;

  foreach v_step in array v_steps loop
    if apply then
      execute v_step;
    end if;
    return next v_step;
  end loop;
end;
$$;
-- 0472_function_create_history_partitions.sql
-- Keeps the history partitions ready: creates every missing one from the interval holding now
-- (or `since`, when earlier: history loaded from elsewhere) through `ahead` intervals after it (and
-- through `through`, when later), for runs, step_states and
-- step_tasks alike. Partition k of each table holds the run ids from uuid_v7_bound(start_k) to
-- uuid_v7_bound(start_k + interval), has foreign keys to its sibling partitions and copies of the
-- default partitions' own unique indexes (a unique index without run_id cannot span partitions).
-- Run ids of a new partition's range that reached a default partition meanwhile (a partition made
-- late, or an id that is not time-ordered) move into it first. One caller at a time creates (the
-- others return 0); returns how many intervals it created, 0 on a plain install. Cheap when nothing
-- is missing: the worker calls it with its stalled recovery.
create or replace function pgflow.create_history_partitions(since timestamptz default null, through timestamptz default null)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_interval interval;
  v_ahead integer;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_lo uuid;
  v_hi uuid;
  v_suffix text;
  v_table text;
  v_options text[];
  v_def text;
  v_created integer := 0;
begin
  select hp.partition_interval, hp.ahead into v_interval, v_ahead from pgflow.history_partitioning as hp;
  if v_interval is null then
    return 0;
  end if;
  v_start := date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00');
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgflow.%I', 'runs_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    return 0;
  end if;

  foreach v_start in array v_missing loop
    v_suffix := 'p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgflow.%I', 'runs_' || v_suffix)) is not null;
    v_created := v_created + 1;
    v_lo := pgflow.uuid_v7_bound(v_start);
    v_hi := pgflow.uuid_v7_bound(v_start + v_interval);
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('create table pgflow.%I (like pgflow.%I including defaults including constraints including storage)',
                     v_table || '_' || v_suffix, v_table);
      select c.reloptions into v_options from pg_class as c where c.oid = format('pgflow.%I', v_table || '_default')::regclass;
      if v_options is not null then
        execute format('alter table pgflow.%I set (%s)', v_table || '_' || v_suffix, array_to_string(v_options, ', '));
      end if;
      execute format('insert into pgflow.%I select * from pgflow.%I where run_id >= $1 and run_id < $2',
                     v_table || '_' || v_suffix, v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['step_tasks', 'step_states', 'runs'] loop
      execute format('delete from pgflow.%I where run_id >= $1 and run_id < $2', v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('alter table pgflow.%I attach partition pgflow.%I for values from (%L) to (%L)',
                     v_table, v_table || '_' || v_suffix, v_lo, v_hi);
      for v_def in
        select pg_get_indexdef(i.indexrelid) from pg_index as i
         where i.indrelid = format('pgflow.%I', v_table || '_default')::regclass
           and not exists (select 1 from pg_inherits as inh where inh.inhrelid = i.indexrelid)
         order by i.indexrelid
      loop
        execute replace(v_def, v_table || '_default', v_table || '_' || v_suffix);
      end loop;
    end loop;
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_states_' || v_suffix, 'step_states_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id, step_slug) references pgflow.%I (run_id, step_slug)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_step_slug_fkey', 'step_states_' || v_suffix);
  end loop;
  return v_created;
end;
$$;
drop function pgflow.partition_archives(boolean);
drop function pgflow.partition_queue_archive(text, boolean);
drop function pgflow.create_archive_partitions(text, timestamptz, timestamptz);
drop function pgflow.prune_queue_archive(text, timestamptz);
drop function pgflow.engine_queues();
alter table pgflow.history_partitioning drop column archives;

-- ---------------------------------------------------------------- 0031_queue_access_down.sql
-- Frozen migration delta 0031_queue_access, down: the seven functions as 0030 left them, without
-- pgflow.queue_access and its writer.

-- 0200_function_set_vt_batch.sql
-- One statement sets the visibility of a batch of messages, each from its own offset (seconds):
--   set     visibility = now + offset, for every message
--   extend  hidden for at least now + offset: a message already hidden that long (within a second)
--           is not written, so a worker that read its batch with a long enough visibility pays no
--           second update per message when the claim applies the task's timeout
-- Returns the messages it wrote.
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[], mode text)
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if mode is null or mode not in ('set', 'extend') then
    raise exception 'set_vt_batch: mode must be ''set'' or ''extend'', got %', coalesce(quote_literal(mode), 'NULL')
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'set_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  return query execute format(
    $q$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
        from unnest($1, $2) as o(msg_id, vt_offset)
       where q.msg_id = o.msg_id
         and ($3 = 'set' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
      returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
    $q$,
    pgmq.format_table_name(queue_name, 'q')
  ) using msg_ids, vt_offsets, mode;
end;
$$;
drop function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]);
drop function pgflow.write_queue_access(text, boolean);

-- ---------------------------------------------------------------- 0030_limit_wakeups_down.sql
-- 0500_function_limit_claim.sql
-- The flow-control half of a claim, called by pgflow.claim_classified before it starts anything:
-- returns the claim's outcomes with 'deferred' for each 'claimed' task a limit of its flow or step
-- refuses now, and records the slots and tokens of the others.
--   concurrency  the key's started tasks are counted from its holds (each still started in its
--                attempt), under the key's limit_slots row lock, so two claims of one key on any
--                two workers decide one after the other; tasks within the limit get a hold, the
--                others wait: the first `limit` waiters of a key are deferred about 1 s, doubling
--                per deferral up to 30 s (0.5 to 1.5 times that each time), the ones behind them
--                20 to 30 s, so a deep backlog does not keep coming back ahead of other keys,
--                and woken at once by pgflow.release_limit_slots when a slot of their key frees
--                (oldest waiter first)
--   rate         the key's token bucket (amount per period, holding at most burst) is refilled for
--                the time elapsed and spent, one token per task; a task without a token is deferred
--                until its token is due
-- A deferred task keeps its attempt count and its queued status; only its message's visibility
-- changes. Lock order: the claim holds its messages; slot rows are locked in key order, and no other
-- writer waits for a slot row while holding a message, so the claim's waits never close a cycle.
create or replace function pgflow.limit_claim(
  queue_name text, ids bigint[], runs uuid[], steps text[], indexes integer[], outcomes text[]
)
returns text[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off set jit = off
as $$
declare
  v_now timestamptz;
  v_cands pgflow.limit_candidate[];
  v_denied integer[];
  v_rate_n integer[];
  v_rate_delay double precision[];
  v_all integer[];
  v_msgs bigint[];
  v_at timestamptz[];
begin
  if outcomes is null or not exists (select 1 from pgflow.flow_limits) then
    return outcomes;
  end if;

  -- every (claimed task, limit of its flow or step) pair, with the task's key for that limit
  select array_agg(row(k.n, k.run_id, k.step_slug, k.task_index, k.id, t.attempts_count + 1, t.flow_slug,
                       l.step_slug, l.kind,
                       case l.key_source
                         when 'input' then coalesce((select r.input ->> l.key_field from pgflow.runs as r
                                                      where r.run_id = k.run_id), '')
                         when 'stored' then coalesce((select rk.key from pgflow.run_limit_keys as rk
                                                       where rk.run_id = k.run_id and rk.step_slug = l.step_slug
                                                         and rk.kind = l.kind), '')
                         else ''
                       end,
                       l.amount, l.period, l.burst)::pgflow.limit_candidate
                   order by t.flow_slug, l.step_slug, l.kind, k.n)
    into v_cands
    from unnest(ids, runs, steps, indexes, outcomes) with ordinality as k(id, run_id, step_slug, task_index, outcome, n)
    cross join lateral (
      select t.flow_slug, t.attempts_count from pgflow.step_tasks as t
       where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
       limit 1
    ) as t
    join pgflow.flow_limits as l on l.flow_slug = t.flow_slug and l.step_slug in ('', k.step_slug)
   where k.outcome = 'claimed';
  if v_cands is null then
    return outcomes;
  end if;
  v_now := clock_timestamp();

  -- a key's first claim creates its row (a rate bucket starts full), then every claim locks its keys'
  -- rows in key order; the decisions below are separate statements, so they read what the claims
  -- that held these locks before committed
  insert into pgflow.limit_slots (flow_slug, step_slug, kind, key, tokens, refilled_at)
  select distinct c.flow_slug, c.scope, c.kind, c.key, coalesce(c.burst, 0), v_now
    from unnest(v_cands) as c
   order by c.flow_slug, c.scope, c.kind, c.key
  on conflict do nothing;
  -- each row locked by its own probe, the keys taken in key order (the outer side of the loop)
  perform 1
     from (select distinct c.flow_slug, c.scope, c.kind, c.key from unnest(v_cands) as c
            order by c.flow_slug, c.scope, c.kind, c.key) as g
    cross join lateral (
      select 1 from pgflow.limit_slots as x
       where x.flow_slug = g.flow_slug and x.step_slug = g.scope and x.kind = g.kind and x.key = g.key
       limit 1
         for update
    ) as x;

  -- concurrency: the key's holds still started in their attempt, then this batch in message order
  select coalesce(array_agg(distinct c.n), '{}') into v_denied
    from (select c.*, row_number() over (partition by c.flow_slug, c.scope, c.key order by c.message_id) as rank
            from unnest(v_cands) as c where c.kind = 'concurrency') as c
    cross join lateral (
      select count(*) as n
        from pgflow.limit_holds as h
       where h.flow_slug = c.flow_slug and h.step_slug = c.scope and h.key = c.key
         and (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is not null
    ) as used
   where c.rank > c.amount - used.n;

  -- rate: refill each bucket for the time elapsed (up to burst), spend a token per task still in
  -- the running, and defer the others until their token is due
  with wanted as (
    select c.*, row_number() over (partition by c.flow_slug, c.scope, c.key order by c.message_id) as rank
      from unnest(v_cands) as c where c.kind = 'rate' and not c.n = any(v_denied)
  ), bucket as (
    select g.flow_slug, g.scope, g.key, g.wanted, g.amount / g.period as per_second, s.row_id,
           least(g.burst::double precision,
                 s.tokens + greatest(0, extract(epoch from v_now - s.refilled_at)) * g.amount / g.period) as available
      from (select w.flow_slug, w.scope, w.key, max(w.amount) as amount, max(w.period) as period,
                   max(w.burst) as burst, count(*) as wanted
              from wanted as w group by w.flow_slug, w.scope, w.key) as g
      cross join lateral (
        select s.ctid as row_id, s.tokens, s.refilled_at from pgflow.limit_slots as s
         where s.flow_slug = g.flow_slug and s.step_slug = g.scope and s.kind = 'rate' and s.key = g.key
         limit 1
      ) as s
  ), spent as (
    update pgflow.limit_slots as s
       set tokens = b.available - least(b.wanted, floor(b.available)), refilled_at = v_now,
           granted_at = case when b.available >= 1 then v_now else s.granted_at end
      from bucket as b
     where s.ctid = b.row_id
    returning 1
  )
  select array_agg(d.n), array_agg(d.delay) into v_rate_n, v_rate_delay
    from (select w.n, max((w.rank - b.available) / b.per_second) as delay
            from wanted as w
            join bucket as b on b.flow_slug = w.flow_slug and b.scope = w.scope and b.key = w.key
           where w.rank > floor(b.available)
           group by w.n) as d;
  v_all := v_denied || coalesce(v_rate_n, '{}');

  -- the tasks the claim may start hold a slot of each of their concurrency keys from now on
  insert into pgflow.limit_holds as h (run_id, task_step_slug, task_index, flow_slug, step_slug, key, attempt, held_at)
  select c.run_id, c.step_slug, c.task_index, c.flow_slug, c.scope, c.key, c.attempt, v_now
    from unnest(v_cands) as c
   where c.kind = 'concurrency' and not c.n = any(v_all)
   order by c.run_id, c.step_slug, c.task_index, c.scope
  on conflict (run_id, task_step_slug, task_index, step_slug)
  do update set flow_slug = excluded.flow_slug, key = excluded.key, attempt = excluded.attempt, held_at = excluded.held_at;
  delete from pgflow.limit_waits as w
   where w.ctid = any(array(
           select x.row_id
             from unnest(v_cands) as c
            cross join lateral (
              select x.ctid as row_id from pgflow.limit_waits as x
               where x.run_id = c.run_id and x.task_step_slug = c.step_slug and x.task_index = c.task_index
               limit 1
            ) as x
            where not c.n = any(v_all)));

  if cardinality(v_all) > 0 then
    -- one wait per deferred task, named by the first limit that refused it (concurrency before rate)
    -- a concurrency deferral is short for the first `limit` waiters of the key (next in line: if a
    -- wake-up is missed they come back soon) and 20 to 30 s behind them: those are woken in turn as
    -- slots free, so a deep backlog does not keep coming back ahead of other keys' messages
    with refused as (
      select distinct on (c.n) c.*, r.delay
        from unnest(v_cands) as c
        left join unnest(v_rate_n, v_rate_delay) as r(n, delay) on r.n = c.n
       where (c.kind = 'concurrency' and c.n = any(v_denied)) or (c.kind = 'rate' and r.n is not null)
       order by c.n, c.kind, c.scope
    ), backlog as (
      select g.flow_slug, g.scope, g.key,
             (select count(*) from (
                select 1 from pgflow.limit_waits as x
                 where x.flow_slug = g.flow_slug and x.step_slug = g.scope and x.kind = 'concurrency'
                   and x.key = g.key
                 limit g.amount + 1) as x) > g.amount as deep
        from (select distinct f.flow_slug, f.scope, f.key, f.amount
                from refused as f where f.kind = 'concurrency') as g
    ), deferred as (
      insert into pgflow.limit_waits as w (run_id, task_step_slug, task_index, flow_slug, step_slug, kind, key,
                                           queue_name, message_id, deferred_at, visible_at)
      select f.run_id, f.step_slug, f.task_index, f.flow_slug, f.scope, f.kind, f.key,
             limit_claim.queue_name, f.message_id, v_now,
             v_now + make_interval(secs => case when f.kind = 'rate' then greatest(f.delay, 0.01)
                                                when b.deep then 20 + 10 * random()
                                                else 0.5 + random() end)
        from refused as f
        left join backlog as b on b.flow_slug = f.flow_slug and b.scope = f.scope and b.key = f.key
       order by f.run_id, f.step_slug, f.task_index
      on conflict (run_id, task_step_slug, task_index) do update
        set flow_slug = excluded.flow_slug, step_slug = excluded.step_slug, kind = excluded.kind,
            key = excluded.key, queue_name = excluded.queue_name, message_id = excluded.message_id,
            deferrals = w.deferrals + case when w.woken_at is null then 1 else 0 end,
            visible_at = case when excluded.kind = 'rate' then excluded.visible_at
                              when w.woken_at is not null then v_now + interval '0.25 seconds'
                              when excluded.visible_at > v_now + interval '15 seconds' then excluded.visible_at
                              else v_now + make_interval(secs => least(30, power(2, w.deferrals) * (0.5 + random())))
                         end,
            woken_at = null
      returning w.message_id, w.visible_at
    )
    select array_agg(d.message_id), array_agg(d.visible_at) into v_msgs, v_at from deferred as d;
    perform pgflow.set_limit_visibility(limit_claim.queue_name, v_msgs, v_at);
  end if;

  return array(
    select case when e.n = any(v_all) then 'deferred' else e.outcome end
      from unnest(outcomes) with ordinality as e(outcome, n)
     order by e.n);
end;
$$;
-- 0502_function_release_limit_slots.sql
-- Frees the concurrency slots of tasks that are no longer started in the attempt that took them (a
-- completion, a failure or retry, an exhaustion, a cancelled or failed run, stalled recovery), of
-- the given runs, or of every run when run_ids is NULL (stalled recovery's sweep, which also
-- collects the holds and waits of deleted runs). Each freed slot wakes the oldest waiting task of its
-- key at once (its message becomes visible now); waits of tasks no longer queued are dropped.
-- Returns the number of slots freed.
-- wait_for_claims (the completion's release, its last step): first lock the limit_slots rows of the
-- keys these runs hold, in key order as a claim does, until commit. A claim deciding one of those
-- keys meanwhile counts this slot as taken: the release waits for that claim to commit and then
-- wakes the tasks it deferred, and a claim that comes later waits for the release and finds the slot
-- free. (Without the wait, a slot freed while a claim deferred the key's only waiter wakes nobody and
-- stays unused until that deferral ends.) A claim holds the messages it read while it waits for a
-- key row, so only a caller that waits for no message row afterwards may pass true; the other paths
-- (failures, cancels, recovery) release without it, and a waiter another transaction holds is skipped.
create or replace function pgflow.release_limit_slots(run_ids uuid[], wait_for_claims boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off set jit = off
as $$
declare
  v_flows text[];
  v_scopes text[];
  v_keys text[];
  v_now timestamptz := clock_timestamp();
  v_queues integer;
begin
  if run_ids is not null then
    if not exists (select 1 from pgflow.limit_holds as h where h.run_id = any(run_ids))
       and not exists (select 1 from pgflow.limit_waits as w where w.run_id = any(run_ids)) then
      return 0;
    end if;
    if wait_for_claims then
      perform 1
         from (select distinct h.flow_slug, h.step_slug, h.key
                 from unnest(run_ids) as k(run_id)
                cross join lateral (select h.flow_slug, h.step_slug, h.key from pgflow.limit_holds as h
                                     where h.run_id = k.run_id offset 0) as h
                order by h.flow_slug, h.step_slug, h.key) as g
        cross join lateral (
          select 1 from pgflow.limit_slots as x
           where x.flow_slug = g.flow_slug and x.step_slug = g.step_slug and x.kind = 'concurrency'
             and x.key = g.key
           limit 1
             for update
        ) as x;
      v_now := clock_timestamp();
    end if;
    with freed as (
      delete from pgflow.limit_holds as h
       where h.run_id = any(run_ids)
         and (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where w.run_id = any(run_ids)
       and (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  else
    with freed as (
      delete from pgflow.limit_holds as h
       where (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  end if;
  if v_flows is null then
    return 0;
  end if;

  -- one waiter per freed slot, oldest first, still queued and not woken already (the waits of
  -- deleted runs, swept by stalled recovery, never take a wake-up)
  with freed as (
    select f.flow_slug, f.step_slug, f.key, count(*) as n
      from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
     group by f.flow_slug, f.step_slug, f.key
  ), woken as (
    update pgflow.limit_waits as w
       set visible_at = v_now, woken_at = v_now
      from freed as f
      cross join lateral (
        select x.ctid as row_id
          from pgflow.limit_waits as x
         where x.flow_slug = f.flow_slug and x.step_slug = f.step_slug and x.kind = 'concurrency'
           and x.key = f.key and x.woken_at is null and x.visible_at > v_now
           and (select 1 from pgflow.step_tasks as t
                 where t.run_id = x.run_id and t.step_slug = x.task_step_slug
                   and t.task_index = x.task_index and t.status = 'queued'
                 limit 1) is not null
         order by x.deferred_at, x.message_id
         limit f.n
           for update skip locked
      ) as x
     where w.ctid = x.row_id
    returning w.queue_name, w.message_id
  )
  select count(pgflow.set_limit_visibility(g.queue_name, g.ids, array_fill(v_now, array[cardinality(g.ids)])))
    into v_queues
    from (select k.queue_name, array_agg(k.message_id) as ids from woken as k group by k.queue_name) as g;
  return cardinality(v_flows);
end;
$$;

-- ---------------------------------------------------------------- 0029_hot_path_without_jit_down.sql
alter function pgflow.cascade(uuid[]) reset jit;
alter function pgflow.claim_classified(text,uuid,bigint[],uuid[],text[],integer[],text[],text[]) reset jit;
alter function pgflow.classify_claim(text,bigint[],text[],text[],text,text) reset jit;
alter function pgflow.complete_and_hand_off(jsonb,text,uuid,text[],text[],bigint[],integer) reset jit;
alter function pgflow.complete_tasks(jsonb) reset jit;
alter function pgflow.fail_task(uuid,text,integer,integer,text,integer) reset jit;
alter function pgflow.limit_claim(text,bigint[],uuid[],text[],integer[],text[]) reset jit;
alter function pgflow.lock_claimed_task(uuid,text,integer,integer) reset jit;
alter function pgflow.maybe_complete_runs(uuid[]) reset jit;
alter function pgflow.release_limit_slots(uuid[],boolean) reset jit;
alter function pgflow.start_flows(text,jsonb,uuid[],integer,integer) reset jit;
alter function pgflow.start_shared_tasks(text,bigint[],uuid,text[],text[]) reset jit;
alter function pgflow.start_tasks(text,text,bigint[],uuid,text) reset jit;

-- ---------------------------------------------------------------- 0028_wake_after_claims_down.sql
-- Frozen migration delta 0028_wake_after_claims, down: the five functions as 0027 left them.

drop function pgflow.release_limit_slots(uuid[], boolean);
-- 0502_function_release_limit_slots.sql
-- Frees the concurrency slots of tasks that are no longer started in the attempt that took them (a
-- completion, a failure or retry, an exhaustion, a cancelled or failed run, stalled recovery), of
-- the given runs, or of every run when run_ids is NULL (stalled recovery's sweep, which also
-- collects the holds and waits of deleted runs). Each freed slot wakes the oldest waiting task of its
-- key at once (its message becomes visible now); waits of tasks no longer queued are dropped.
-- Returns the number of slots freed. Takes no lock a claim holds: waiting messages are skipped when
-- a claim has them (that claim is deciding them already).
create or replace function pgflow.release_limit_slots(run_ids uuid[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_flows text[];
  v_scopes text[];
  v_keys text[];
  v_now timestamptz := clock_timestamp();
  v_queues integer;
begin
  if run_ids is not null then
    if not exists (select 1 from pgflow.limit_holds as h where h.run_id = any(run_ids))
       and not exists (select 1 from pgflow.limit_waits as w where w.run_id = any(run_ids)) then
      return 0;
    end if;
    with freed as (
      delete from pgflow.limit_holds as h
       where h.run_id = any(run_ids)
         and (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where w.run_id = any(run_ids)
       and (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  else
    with freed as (
      delete from pgflow.limit_holds as h
       where (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  end if;
  if v_flows is null then
    return 0;
  end if;

  -- one waiter per freed slot, oldest first, still queued and not woken already (the waits of
  -- deleted runs, swept by stalled recovery, never take a wake-up); a waiter a claim holds is skipped
  with freed as (
    select f.flow_slug, f.step_slug, f.key, count(*) as n
      from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
     group by f.flow_slug, f.step_slug, f.key
  ), woken as (
    update pgflow.limit_waits as w
       set visible_at = v_now, woken_at = v_now
      from freed as f
      cross join lateral (
        select x.ctid as row_id
          from pgflow.limit_waits as x
         where x.flow_slug = f.flow_slug and x.step_slug = f.step_slug and x.kind = 'concurrency'
           and x.key = f.key and x.woken_at is null and x.visible_at > v_now
           and (select 1 from pgflow.step_tasks as t
                 where t.run_id = x.run_id and t.step_slug = x.task_step_slug
                   and t.task_index = x.task_index and t.status = 'queued'
                 limit 1) is not null
         order by x.deferred_at, x.message_id
         limit f.n
           for update skip locked
      ) as x
     where w.ctid = x.row_id
    returning w.queue_name, w.message_id
  )
  select count(pgflow.set_limit_visibility(g.queue_name, g.ids, array_fill(v_now, array[cardinality(g.ids)])))
    into v_queues
    from (select k.queue_name, array_agg(k.message_id) as ids from woken as k group by k.queue_name) as g;
  return cardinality(v_flows);
end;
$$;

-- ---------------------------------------------------------------- 0024_batch_joins_down.sql
-- 0303_function_hand_off_tasks.sql
-- Direct hand-off: claims, for the worker that just completed tasks of the given runs, the tasks
-- that completion made ready on its queue, so that worker runs them without waiting for a
-- notification, a read and a claim. Only tasks created by the calling statement are taken (queued
-- since it began, never attempted: nobody else has seen their messages yet), of a (flow_slug,
-- step_slug) pair the worker supports whose flow is still at the generation it compiled against,
-- on queue_name, with no start delay (of the step, or what remains of a delayed run's not_before),
-- at most free_slots of them, in task key order (the order every writer locks a run's tasks).
-- The claiming itself is pgflow.claim_classified's, as for a read batch: one more attempt,
-- started_at, last_worker_id, the message hidden for the effective timeout + 2 s. The message stays
-- the durable record: a worker that dies holding a handed-off task loses it to stalled recovery
-- like any other claim. Returns one claim_record ('claimed') per task handed off.
create or replace function pgflow.hand_off_tasks(
  queue_name text, worker_id uuid, run_ids uuid[], support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_ids bigint[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  if coalesce(free_slots, 0) <= 0 or coalesce(cardinality(run_ids), 0) = 0
     or coalesce(cardinality(support_flows), 0) = 0 then
    return;
  end if;

  select array_agg(h.message_id order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.run_id order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.step_slug order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.task_index order by h.run_id, h.step_slug, h.task_index)
    into v_ids, v_runs, v_steps, v_indexes
    from (
      select t.run_id, t.step_slug, t.task_index, t.message_id
        from (select distinct k.run_id from unnest(hand_off_tasks.run_ids) as k(run_id)) as k
        join pgflow.runs as r on r.run_id = k.run_id
        join pgflow.step_states as ss on ss.run_id = r.run_id
        join pgflow.step_tasks as t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        join pgflow.flows as f on f.flow_slug = ss.flow_slug
        join unnest(hand_off_tasks.support_flows, hand_off_tasks.support_steps, hand_off_tasks.support_generations)
          as p(flow_slug, step_slug, generation)
          on p.flow_slug = ss.flow_slug and p.step_slug = ss.step_slug and p.generation = f.generation
       where r.status = 'started' and (r.not_before is null or r.not_before <= clock_timestamp())
         and ss.status = 'started' and ss.started_at >= statement_timestamp()
         and coalesce(s.opt_start_delay, 0) = 0
         and t.status = 'queued' and t.attempts_count = 0 and t.queued_at >= statement_timestamp()
         and t.queue_name = hand_off_tasks.queue_name and t.message_id is not null
       order by t.run_id, t.step_slug, t.task_index
       limit hand_off_tasks.free_slots
    ) as h;
  if v_ids is null then
    return;
  end if;

  return query
    select c.* from pgflow.claim_classified(hand_off_tasks.queue_name, hand_off_tasks.worker_id, v_ids, v_runs,
                                            v_steps, v_indexes, array_fill('claimed'::text, array[cardinality(v_ids)]),
                                            '{}'::text[]) as c
     where c.outcome = 'claimed';
end;
$$;

-- ---------------------------------------------------------------- 0023_one_home_down.sql
drop function pgflow.lock_claimed_task(run_id uuid, step_slug text, task_index integer, attempt integer);

-- ---------------------------------------------------------------- 0022_partitioned_history_down.sql
-- Frozen migration delta 0022_partitioned_history, down: back to random (UUIDv4) run ids and an
-- unpartitioned history. A partitioned install cannot go down (its tables would have to be copied
-- back into plain ones): the down migration refuses and changes nothing.

do $$
begin
  if exists (select 1 from pgflow.history_partitioning) then
    raise exception 'the pgflow history is partitioned (pgflow_partition): migration 0022 cannot be reversed on it'
      using errcode = '55000';
  end if;
end;
$$;
drop function pgflow.create_history_partitions(timestamptz, timestamptz);
drop function pgflow.partition_history(interval, integer, boolean);
-- 0280_function_start_flows.sql
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
-- priority (-100..100, NULL: the steps' and the flow's defaults) is every run's claim priority.
-- Holds the flow's start lock in shared mode until the caller's transaction ends: starts run side by
-- side, while a deletion (pgflow.delete_flow_and_data takes it exclusively) waits for them, and a
-- start that comes during a deletion waits for it, then finds the flow gone.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, run_ids uuid[] default null, start_delay integer default null,
  priority integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_ids uuid[];
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:start:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
      using errcode = '22023';
  end if;
  if start_delay is not null and start_delay < 0 then
    raise exception 'start_flows(%): start_delay must be >= 0 seconds, got %', flow_slug, start_delay
      using errcode = '22023';
  end if;
  if priority is not null and priority not between -100 and 100 then
    raise exception 'start_flows(%): priority must be a whole number from -100 to 100, got %', flow_slug, priority
      using errcode = '22023';
  end if;
  if run_ids is not null and cardinality(run_ids) <> jsonb_array_length(inputs) then
    raise exception 'start_flows(%): % inputs but % run ids', flow_slug, jsonb_array_length(inputs), cardinality(run_ids)
      using errcode = '22023';
  end if;

  select s.step_slug into v_root_map
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug and s.step_type = 'map' and s.deps_count = 0
   order by s.step_index limit 1;
  if v_root_map is not null then
    select min(e.n) - 1 into v_bad
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array';
    if v_bad is not null then
      raise exception 'flow %: root map step % needs an array input, but input % is not an array',
        flow_slug, v_root_map, v_bad
        using errcode = '22023';
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, not_before, priority)
    select coalesce(run_ids[e.n], gen_random_uuid()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug),
           case when start_flows.start_delay > 0
                then clock_timestamp() + make_interval(secs => start_flows.start_delay) end,
           start_flows.priority
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
    returning runs.run_id, runs.input
  ), states as (
    insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
    select start_flows.flow_slug, nr.run_id, s.step_slug, s.deps_count,
           case when s.step_type = 'single' then 1
                when s.deps_count = 0 then jsonb_array_length(nr.input)
           end
      from new_runs as nr
      cross join pgflow.steps as s
     where s.flow_slug = start_flows.flow_slug
  )
  select array_agg(nr.run_id) into v_ids from new_runs as nr;

  perform pgflow.cascade(v_ids);

  return query
    select r.* from pgflow.runs as r
      join unnest(v_ids) with ordinality as i(run_id, n) on i.run_id = r.run_id
     order by i.n;
end;
$$;
-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. Archives of shared queues are left alone: several flows'
-- messages meet there, so their retention is queue-wide (pgflow.prune_shared_archive)
-- (a worker that sent a heartbeat in the last 10 minutes is never pruned, whatever the retention).
create or replace function pgflow.prune_data_older_than(retention interval)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_cutoff timestamptz := now() - retention;
  v_runs uuid[];
  v_tasks integer;
  v_states integer;
  v_workers integer;
  v_archived bigint := 0;
  v_queue text;
  v_count bigint;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  select array_agg(r.run_id) into v_runs
    from pgflow.runs as r
   where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
  v_runs := coalesce(v_runs, '{}');

  delete from pgflow.step_tasks as t where t.run_id = any(v_runs);
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states as ss where ss.run_id = any(v_runs);
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r where r.run_id = any(v_runs);

  delete from pgflow.workers as w
   where coalesce(w.stopped_at, w.last_heartbeat_at) < v_cutoff
     and (w.stopped_at is not null or w.last_heartbeat_at < now() - interval '10 minutes');
  get diagnostics v_workers = row_count;

  for v_queue in
    select distinct s.queue_name from pgflow.steps as s
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(s.queue_name, 'a'))) is not null
       and not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = s.queue_name)
     order by s.queue_name
  loop
    execute format('delete from pgmq.%I where archived_at < $1', pgmq.format_table_name(v_queue, 'a'))
      using v_cutoff;
    get diagnostics v_count = row_count;
    v_archived := v_archived + v_count;
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs), 'step_states', v_states, 'step_tasks', v_tasks,
                            'workers', v_workers, 'archived_messages', v_archived);
end;
$$;
-- 0454_function_fire_due_schedules.sql
-- Fires every due tick of at most max_schedules schedules: starts each tick's run through
-- pgflow.start_flows and records the tick in pgflow.schedule_ticks in this same transaction, so a
-- tick fires once, or (when the transaction is lost) not at all and is fired by the next call.
-- Concurrent callers do not wait: a transaction-level advisory try-lock lets one caller fire while
-- the others return no rows at once; schedule rows being edited are skipped (SKIP LOCKED) and the
-- ledger's primary key refuses a tick recorded before, whatever the isolation level.
-- Every due tick is consumed, fired or missed, as pgflow.schedule_due_ticks decides per catch-up
-- policy. `inputs` carries the inputs of callable-input schedules, evaluated by the Python scheduler:
-- a JSON array of {"schedule": name, "tick": timestamp, "input": value}; a callable schedule with a
-- firing tick it has no input for is left due. When starting a flow's runs fails (e.g. the flow was
-- deleted), its schedules keep their ticks and record the error in last_error; the others still fire.
-- Returns the ticks fired by this call.
create or replace function pgflow.fire_due_schedules(
  now timestamptz default clock_timestamp(),
  max_schedules integer default 500,
  inputs jsonb default null,
  grace interval default interval '60 seconds'
)
returns table (schedule_name text, tick timestamptz, run_id uuid)
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_names text[];
  v_plan record;
  v_flow record;
  v_held text[] := '{}';
  v_fired_names text[] := '{}';
  v_fired_ticks timestamptz[] := '{}';
  v_fired_ids uuid[] := '{}';
  v_new_names text[];
  v_new_ticks timestamptz[];
  v_new_ids uuid[];
  v_new_inputs jsonb;
begin
  if fire_due_schedules.now is null or max_schedules is null or max_schedules < 1 then
    raise exception 'fire_due_schedules: now must be a timestamp and max_schedules >= 1, got % and %',
      coalesce(fire_due_schedules.now::text, 'NULL'), coalesce(max_schedules::text, 'NULL')
      using errcode = '22023';
  end if;
  if inputs is not null and jsonb_typeof(inputs) <> 'array' then
    raise exception 'fire_due_schedules: inputs must be a JSON array of {"schedule", "tick", "input"}'
      using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(hashtextextended('pgflow:fire_due_schedules', 0)) then
    return;
  end if;

  select array_agg(l.schedule_name) into v_names
    from (select s.schedule_name
            from pgflow.schedules as s
           where s.schedule_name = any(pgflow.due_schedule_names(fire_due_schedules.now, max_schedules,
                                                                 inputs is not null))
             for update skip locked) as l;
  if v_names is null then
    return;
  end if;

  select array_agg(d.schedule_name order by d.schedule_name, d.tick) as names,
         array_agg(d.tick order by d.schedule_name, d.tick) as ticks,
         array_agg(d.fire order by d.schedule_name, d.tick) as fires,
         array_agg(d.flow_slug order by d.schedule_name, d.tick) as flows,
         jsonb_agg(case when d.input_callable is null then d.input else i.input end
                   order by d.schedule_name, d.tick) as inputs,
         coalesce(array_agg(distinct d.schedule_name)
                    filter (where d.fire and d.input_callable is not null and i.input is null), '{}') as lacking
    into v_plan
    from pgflow.schedule_due_ticks(v_names, fire_due_schedules.now, grace) as d
    left join lateral (
      select e.value -> 'input' as input
        from jsonb_array_elements(coalesce(inputs, '[]'::jsonb)) as e(value)
       where e.value ->> 'schedule' = d.schedule_name and (e.value ->> 'tick')::timestamptz = d.tick
         and e.value ? 'input'
       limit 1
    ) as i on d.input_callable is not null;
  if v_plan.names is null then
    return;
  end if;
  v_held := v_plan.lacking;

  for v_flow in
    select p.flow, array_agg(p.name order by p.n) as names, array_agg(p.tick order by p.n) as ticks,
           jsonb_agg(p.input order by p.n) as inputs
      from rows from (unnest(v_plan.names), unnest(v_plan.ticks), unnest(v_plan.fires), unnest(v_plan.flows),
                      jsonb_array_elements(v_plan.inputs)) with ordinality as p(name, tick, fire, flow, input, n)
     where p.fire and not (p.name = any(v_held))
     group by p.flow
     order by p.flow
  loop
    begin
      with fresh as (
        insert into pgflow.schedule_ticks as st (schedule_name, tick, run_id)
        select u.name, u.tick, gen_random_uuid()
          from unnest(v_flow.names, v_flow.ticks) as u(name, tick)
        on conflict do nothing
        returning st.schedule_name, st.tick, st.run_id
      )
      select array_agg(f.schedule_name order by f.schedule_name, f.tick),
             array_agg(f.tick order by f.schedule_name, f.tick),
             array_agg(f.run_id order by f.schedule_name, f.tick),
             jsonb_agg(u.input order by f.schedule_name, f.tick)
        into v_new_names, v_new_ticks, v_new_ids, v_new_inputs
        from fresh as f
        join rows from (unnest(v_flow.names), unnest(v_flow.ticks), jsonb_array_elements(v_flow.inputs))
             as u(name, tick, input) on u.name = f.schedule_name and u.tick = f.tick;
      if v_new_ids is not null then
        perform pgflow.start_flows(v_flow.flow, v_new_inputs, v_new_ids);
        v_fired_names := v_fired_names || v_new_names;
        v_fired_ticks := v_fired_ticks || v_new_ticks;
        v_fired_ids := v_fired_ids || v_new_ids;
      end if;
    exception when others then
      v_held := v_held || v_flow.names;
      update pgflow.schedules as s
         set last_error = left('starting flow ' || v_flow.flow || ': ' || sqlerrm, 2000)
       where s.schedule_name = any(v_flow.names);
    end;
  end loop;

  with consumed as (
    select p.name, count(*) filter (where not p.fire) as missed
      from rows from (unnest(v_plan.names), unnest(v_plan.fires)) as p(name, fire)
     where not (p.name = any(v_held))
     group by p.name
  ), latest as (
    select distinct on (f.name) f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick desc
  ), remaining as (
    select s.schedule_name, r.upcoming,
           pgflow.schedule_next_fire_at(s.schedule_name, r.upcoming, s.jitter_seconds) as next_fire_at
      from pgflow.schedules as s
     cross join lateral (
       select coalesce(array(select u.tick from unnest(s.upcoming) as u(tick)
                              where pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds)
                                    > fire_due_schedules.now
                              order by u.tick), '{}') as upcoming
     ) as r
     where s.schedule_name = any(array(select c.name from consumed as c))
  )
  update pgflow.schedules as s
     set upcoming = r.upcoming,
         next_fire_at = r.next_fire_at,
         last_tick = greatest(s.last_tick, l.tick),
         last_run_id = coalesce(l.run_id, s.last_run_id),
         last_fired_at = case when l.tick is null then s.last_fired_at else clock_timestamp() end,
         missed_ticks = s.missed_ticks + c.missed,
         last_error = null
    from consumed as c
    join remaining as r on r.schedule_name = c.name
    left join latest as l on l.name = c.name
   where s.schedule_name = c.name;

  return query
    select f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick;
end;
$$;
-- 0456_function_trigger_schedule.sql
-- Fires a schedule now, outside its cron ticks: starts one run through pgflow.start_flows and
-- records it in the ledger as a 'manual' tick at `now`, in one transaction. Works on a paused
-- schedule too (an operator asked for it). `input` replaces the stored input; a callable-input
-- schedule needs it (Python evaluates the callable). Returns the run id.
create or replace function pgflow.trigger_schedule(schedule_name text, now timestamptz default clock_timestamp(), input jsonb default null)
returns uuid
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_schedule pgflow.schedules;
  v_run_id uuid := gen_random_uuid();
begin
  select * into v_schedule from pgflow.schedules as s where s.schedule_name = trigger_schedule.schedule_name for update;
  if not found then
    raise exception 'schedule % does not exist', quote_literal(coalesce(trigger_schedule.schedule_name, 'NULL'))
      using errcode = '22023';
  end if;
  if v_schedule.input_callable is not null and trigger_schedule.input is null then
    raise exception 'schedule % takes its input from %: pass the input (the Python API evaluates it)',
      quote_literal(v_schedule.schedule_name), v_schedule.input_callable
      using errcode = '22023';
  end if;
  insert into pgflow.schedule_ticks (schedule_name, tick, run_id, kind)
  values (v_schedule.schedule_name, trigger_schedule.now, v_run_id, 'manual');
  perform pgflow.start_flows(v_schedule.flow_slug, jsonb_build_array(coalesce(trigger_schedule.input, v_schedule.input)),
                             array[v_run_id]);
  update pgflow.schedules as s
     set last_run_id = v_run_id, last_fired_at = clock_timestamp()
   where s.schedule_name = v_schedule.schedule_name;
  return v_run_id;
end;
$$;
alter table pgflow.runs alter column run_id set default gen_random_uuid();
drop index pgflow.runs_rerun_of_idx;
drop table pgflow.history_partitioning;
drop function pgflow.uuid_v7_bound(timestamptz);
drop function pgflow.uuid_v7();

-- ---------------------------------------------------------------- 0021_concurrency_limits_down.sql
drop function pgflow.set_flow_limits(text, jsonb);
drop function pgflow.release_limit_slots(uuid[]);
drop function pgflow.set_limit_visibility(text, bigint[], timestamptz[]);
drop function pgflow.limit_claim(text, bigint[], uuid[], text[], integer[], text[]);
drop type pgflow.limit_candidate;
drop table pgflow.limit_waits;
drop table pgflow.limit_holds;
drop table pgflow.limit_slots;
drop table pgflow.run_limit_keys;
drop table pgflow.flow_limits;

-- ---------------------------------------------------------------- 0020_priorities_down.sql
-- Frozen migration delta 0020_priorities, down: no priorities (the queue indexes, the columns and
-- the priority parameters removed; the 0018 definitions back).

do $$
declare
  v_queue text;
begin
  for v_queue in select m.queue_name from pgmq.meta as m order by 1
  loop
    execute format('drop index if exists pgmq.%I', pgmq.format_table_name(v_queue, 'q') || '_priority_idx');
  end loop;
end;
$$;
drop function pgflow.start_flow(text, jsonb, uuid, integer, integer);
drop function pgflow.start_flows(text, jsonb, uuid[], integer, integer);
-- 0290_function_start_flow.sql
-- One run of start_flows: the same checks, an optional run id and start delay (seconds).
create or replace function pgflow.start_flow(
  flow_slug text, input jsonb, run_id uuid default null, start_delay integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end,
                                                start_delay);
end;
$$;
-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed as a
-- short diff by step slug, and "mismatch" says whether the shape, the routing or both differ) or
-- recompiled (the changed flow replaced: its data deleted, then compiled again). Every answer
-- carries the flow's generation (a fresh number per compilation, which a worker's claim compares)
-- and, for a mismatch or a replacement, the flow's runs and unfinished runs (the ones deleted).
-- on_change says what a changed definition may do: 'refuse' (never deletes); 'replace-if-idle'
-- (replaces only when no run is unfinished); 'replace' (an explicit request: replaces, but when
-- confirmed_runs is given, only while the flow has no more runs than the caller showed and had
-- confirmed). Before counting, a replacement takes the flow's start lock exclusively (every start
-- holds it shared until its transaction ends, before it touches a row): no run can start between the
-- count and the deletion, and no row lock is held while waiting for starts. "refused" names why a
-- replacement did not happen ('unfinished' or 'confirmation'). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint default null)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_route_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
  v_mode text := coalesce(shape->>'queue_mode', 'flow');
  v_route jsonb;
  v_mismatch text[] := '{}';
  v_bad_slug text;
  v_runs bigint;
  v_unfinished bigint;
  v_refused text;
begin
  if on_change is null or on_change not in ('refuse', 'replace-if-idle', 'replace') then
    raise exception 'ensure_flow_compiled(%): on_change must be refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', quote_literal(coalesce(flow_slug, 'NULL')), quote_literal(v_mode)
      using errcode = '22023';
  end if;
  if v_mode = 'step' and jsonb_array_length(shape->'steps') = 0 then
    raise exception 'step-queued flow % has no steps: add steps before with_step_queues', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  select x.e->>'slug' into v_bad_slug from jsonb_array_elements(shape->'steps') as x(e)
   where jsonb_typeof(x.e->'slug') is distinct from 'string' or not pgflow.is_valid_slug(x.e->>'slug')
   limit 1;
  if found then
    raise exception 'invalid step slug % in flow %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_bad_slug, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;

  -- the route: generated (plain, step-queued) or given (routed), every name validated before
  -- anything changes
  if v_mode = 'routed' then
    if jsonb_typeof(shape->'route') is distinct from 'object' then
      raise exception 'routed flow % needs a "route" object {step_slug: queue_name}', quote_literal(flow_slug)
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(x.e->>'slug'), ', ' order by x.n) into v_bad_slug
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n)
     where not (shape->'route') ? (x.e->>'slug');
    if v_bad_slug is not null then
      raise exception 'route of flow % has no queue for step(s) %: give every step exactly one queue',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(r.key), ', ' order by r.key) into v_bad_slug
      from jsonb_object_keys(shape->'route') as r(key)
     where not exists (select 1 from jsonb_array_elements(shape->'steps') as x(e) where x.e->>'slug' = r.key);
    if v_bad_slug is not null then
      raise exception 'route of flow % names %, which are not its steps (steps: %)',
        quote_literal(flow_slug), v_bad_slug,
        (select string_agg(x.e->>'slug', ', ') from jsonb_array_elements(shape->'steps') as x(e))
        using errcode = '22023';
    end if;
    select string_agg(format('%s -> %s', r.key, r.value), ', ' order by r.key) into v_bad_slug
      from jsonb_each(shape->'route') as r(key, value)
     where jsonb_typeof(r.value) <> 'string' or not pgflow.is_valid_queue_name(r.value #>> '{}')
        or position('__' in (r.value #>> '{}')) > 0;
    if v_bad_slug is not null then
      raise exception 'route of flow %: invalid shared queue name(s) %: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    v_route := shape->'route';
  else
    select coalesce(jsonb_object_agg(x.e->>'slug',
             case v_mode when 'step' then pgflow.step_queue_name(flow_slug, x.e->>'slug', (x.n - 1)::integer)
                         else lower(flow_slug) end), '{}'::jsonb)
      into v_route
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
  end if;
  perform pgmq.validate_queue_name(r.queue) from jsonb_each_text(v_route) as r(step, queue);
  if v_mode <> 'routed' and shape ? 'route' and shape->'route' is distinct from v_route then
    raise exception 'flow %: the client generated the route % but the database generates %; deploy pgflow_django code and migrations of the same release',
      quote_literal(flow_slug), shape->'route', v_route
      using errcode = '22023';
  end if;

  if exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
             'slug', e->'slug', 'step_type', coalesce(e->'step_type', '"single"'),
             'deps', coalesce((select jsonb_agg(d order by d) from jsonb_array_elements_text(e->'deps') as d), '[]'::jsonb),
             'when_unmet', coalesce(e->'when_unmet', '"skip"'),
             'when_exhausted', coalesce(e->'when_exhausted', '"fail"'),
             'required_input_pattern', coalesce(e->'required_input_pattern', 'null'),
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null')
           ) order by n), '[]'::jsonb))
      into v_expected
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
    v_found := pgflow.flow_shape(flow_slug);

    if v_expected <> v_found then
      v_mismatch := v_mismatch || 'shape'::text;
    end if;
    select array_agg(diff order by ord) into v_route_differences
      from (
        select 0 as ord, format('queue mode: %s in the definition, %s in the database', v_mode, f.queue_mode) as diff
          from pgflow.flows as f
         where f.flow_slug = ensure_flow_compiled.flow_slug and f.queue_mode <> v_mode
        union all
        select s.step_index + 1, format('route of step %s: queue %s in the definition, %s in the database',
                                        s.step_slug, v_route->>s.step_slug, s.queue_name)
          from pgflow.steps as s
         where s.flow_slug = ensure_flow_compiled.flow_slug and v_route ? s.step_slug
           and v_route->>s.step_slug <> s.queue_name
      ) as d;
    if v_route_differences is not null then
      v_mismatch := v_mismatch || 'routing'::text;
    end if;

    if cardinality(v_mismatch) = 0 then
      v_status := 'verified';
      perform pgflow.check_flow_queues(flow_slug);
      perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                       where v_mode = 'routed' order by 1) as d(q);
    else
      -- a short diff by step slug, database -> definition: removed, added, changed, reordered
      with ex as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_expected->'steps') with ordinality as x(e, n)
      ), fo as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_found->'steps') with ordinality as x(e, n)
      ), common as (
        select ex.slug, ex.n as ex_n, fo.n as fo_n, ex.e as ex_e, fo.e as fo_e from ex join fo using (slug)
      )
      select array_agg(diff order by ord) into v_differences
        from (
          select fo.n as ord, format('- step %s', fo.slug) as diff
            from fo where not exists (select 1 from ex where ex.slug = fo.slug)
          union all
          select 10000 + ex.n, format('+ step %s%s%s', ex.slug,
                   case when ex.e->>'step_type' <> 'single' then format(' (%s)', ex.e->>'step_type') else '' end,
                   case when jsonb_array_length(ex.e->'deps') > 0
                        then format(' depending on %s', (select string_agg(d, ', ') from jsonb_array_elements_text(ex.e->'deps') as d))
                        else '' end)
            from ex where not exists (select 1 from fo where fo.slug = ex.slug)
          union all
          select 20000 + c.ex_n * 10 + k.n, format('~ step %s: %s %s -> %s', c.slug, k.key,
                   coalesce(c.fo_e->k.key #>> '{}', 'null'), coalesce(c.ex_e->k.key #>> '{}', 'null'))
            from common as c
           cross join unnest(array['step_type', 'deps', 'when_unmet', 'when_exhausted',
                                   'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where c.ex_e->k.key is distinct from c.fo_e->k.key
          union all
          select 30000, format('~ step order: %s -> %s', o.found, o.expected)
            from (select string_agg(c.slug, ', ' order by c.fo_n) as found,
                         string_agg(c.slug, ', ' order by c.ex_n) as expected from common as c) as o
           where o.found <> o.expected
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if on_change <> 'refuse' then
        -- starts hold this lock shared until they commit: holding it, the count below stays true
        perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || ensure_flow_compiled.flow_slug, 0));
      end if;
      select count(*), count(*) filter (where r.status = 'started') into v_runs, v_unfinished
        from pgflow.runs as r where r.flow_slug = ensure_flow_compiled.flow_slug;
      v_refused := case
        when on_change = 'replace-if-idle' and v_unfinished > 0 then 'unfinished'
        when on_change = 'replace' and v_runs > confirmed_runs then 'confirmation'
      end;
      if on_change = 'refuse' or v_refused is not null then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb,
                                  'generation', (select f.generation from pgflow.flows as f
                                                  where f.flow_slug = ensure_flow_compiled.flow_slug),
                                  'runs', v_runs, 'unfinished_runs', v_unfinished, 'refused', v_refused);
      end if;
      perform pgflow.delete_flow_and_data(flow_slug);
      v_status := 'recompiled';
    end if;
  end if;

  if v_status = 'verified' then
    with flow_opts as (
      select f.flow_slug, o.key, o.old_value, (v_options->>o.key)::integer as new_value
        from pgflow.flows as f
       cross join lateral (values ('max_attempts', f.opt_max_attempts), ('base_delay', f.opt_base_delay),
                                  ('timeout', f.opt_timeout)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer
        from jsonb_array_elements(shape->'steps') as x(e)
       where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
         and exists (select 1 from step_opts as so where so.step_slug = s.step_slug)
      returning 1
    )
    select array_agg(u order by u) into v_updated
      from (
        select format('flow %s: %s -> %s', fo.key, coalesce(fo.old_value::text, 'default'), coalesce(fo.new_value::text, 'default')) as u
          from flow_opts as fo
        union all
        select format('step %s %s: %s -> %s', so.step_slug, so.key, coalesce(so.old_value::text, 'default'), coalesce(so.new_value::text, 'default'))
          from step_opts as so
        union all select null from flow_update where false
        union all select null from step_update where false
      ) as changes;
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb),
                              'generation', (select f.generation from pgflow.flows as f
                                              where f.flow_slug = ensure_flow_compiled.flow_slug));
  end if;

  perform pgflow.create_flow(flow_slug, (v_options->>'max_attempts')::integer,
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer, v_mode);
  if v_mode = 'flow' then
    perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
  elsif v_mode = 'routed' then
    perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                     order by 1) as d(q);
  end if;
  for v_step in select e from jsonb_array_elements(shape->'steps') as x(e)
  loop
    perform pgflow.add_step(
      flow_slug, v_step->>'slug',
      coalesce(array(select jsonb_array_elements_text(v_step->'deps')), '{}'),
      (v_step->'options'->>'max_attempts')::integer,
      (v_step->'options'->>'base_delay')::integer,
      (v_step->'options'->>'timeout')::integer,
      (v_step->'options'->>'start_delay')::integer,
      coalesce(v_step->>'step_type', 'single'),
      nullif(v_step->'required_input_pattern', 'null'::jsonb),
      nullif(v_step->'forbidden_input_pattern', 'null'::jsonb),
      coalesce(v_step->>'when_unmet', 'skip'),
      coalesce(v_step->>'when_exhausted', 'fail'),
      case when v_mode = 'routed' then v_route->>(v_step->>'slug') end
    );
  end loop;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;
-- 0440_function_rerun.sql
-- Starts a new run of a finished run's flow with the same input, linked to it by rerun_of.
create or replace function pgflow.rerun(run_id uuid)
returns uuid
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_run pgflow.runs;
  v_new uuid := gen_random_uuid();
begin
  select * into v_run from pgflow.runs as r where r.run_id = rerun.run_id;
  if not found then
    raise exception 'run % does not exist', rerun.run_id using errcode = 'P0002';
  end if;
  if v_run.status = 'started' then
    raise exception 'run % is still started: cancel it or wait for it to finish before re-running it', rerun.run_id
      using errcode = '55000';
  end if;
  perform 1 from pgflow.start_flow(v_run.flow_slug, v_run.input, v_new);
  update pgflow.runs as r set rerun_of = rerun.run_id where r.run_id = v_new;
  return v_new;
end;
$$;
-- 0445_function_retry_run.sql
-- Retries a failed (or cancelled) run from where it failed, in place: its completed steps and tasks
-- keep their outputs; every failed or cancelled task is queued again with a new message, its step is
-- started again, and the run is started again so its dependents follow. Returns the number of tasks
-- queued again. The run's and steps' errors are cleared (the admin's Retry action logs the run's
-- error first); each task keeps its attempt_errors.
-- Attempt numbers continue: a retried task's next claim is one more attempt than every claim before
-- it, so a worker still running an old claim (a task cancelled mid-claim) reports a stale attempt
-- that is refused, whenever it arrives. The attempt a cancel cut short is recorded in attempt_errors
-- (with the run's error), so every attempt has its outcome.
-- Each retried task gets its full max_attempts again (attempts_base marks where they start).
-- Lock order: run, then its tasks, then the new messages.
-- Refused, changing nothing, for a run that is not failed, and for one whose failed step has no
-- failed or cancelled task to run again (it failed outside its tasks, so a retry would fail again).
create or replace function pgflow.retry_run(run_id uuid)
returns integer
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_status text;
  v_error text;
  v_stuck text;
  v_count integer := 0;
  v_batch record;
begin
  select r.status, r.error_message into v_status, v_error
    from pgflow.runs as r where r.run_id = retry_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', retry_run.run_id using errcode = 'P0002';
  end if;
  if v_status <> 'failed' then
    raise exception 'run % is %: only a failed or cancelled run can be retried', retry_run.run_id, v_status
      using errcode = '55000';
  end if;

  perform 1 from pgflow.step_tasks as t
   where t.run_id = retry_run.run_id
   order by t.step_slug, t.task_index
     for no key update;

  select string_agg(ss.step_slug, ', ' order by ss.step_slug) into v_stuck
    from pgflow.step_states as ss
   where ss.run_id = retry_run.run_id and ss.status in ('failed', 'cancelled')
     and not exists (select 1 from pgflow.step_tasks as t
                      where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                        and t.status in ('failed', 'cancelled'));
  if v_stuck is not null then
    raise exception 'run % failed in step % outside its tasks: a retry would fail the same way; re-run it instead',
      retry_run.run_id, v_stuck using errcode = '55000';
  end if;

  update pgflow.runs as r
     set status = 'started', failed_at = null, error_message = null, output = null
   where r.run_id = retry_run.run_id;

  update pgflow.step_states as ss
     set status = 'started', error_message = null, failed_at = null,
         remaining_tasks = (select count(*) from pgflow.step_tasks as t
                             where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                               and t.status <> 'completed')
   where ss.run_id = retry_run.run_id and ss.status in ('failed', 'cancelled');

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
           'attempt', t.attempts_count, 'worker_id', t.last_worker_id,
           'error', coalesce(v_error, 'cancelled'), 'failed_at', clock_timestamp()))
   where t.run_id = retry_run.run_id and t.status = 'cancelled' and t.attempts_count > 0
     and not t.attempt_errors @> jsonb_build_array(jsonb_build_object('attempt', t.attempts_count));

  for v_batch in
    select t.queue_name, array_agg(t.step_slug order by t.step_slug, t.task_index) as steps,
           array_agg(t.task_index order by t.step_slug, t.task_index) as indexes,
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.step_slug, t.task_index) as messages
      from pgflow.step_tasks as t
     where t.run_id = retry_run.run_id and t.status in ('failed', 'cancelled')
     group by t.queue_name
     order by t.queue_name
  loop
    update pgflow.step_tasks as t
       set status = 'queued', message_id = sent.msg_id, error_message = null, failed_at = null,
           attempts_base = t.attempts_count,
           queued_at = clock_timestamp(), requeued_count = 0, last_requeued_at = null,
           permanently_stalled_at = null
      from unnest(v_batch.steps, v_batch.indexes) with ordinality as k(step_slug, task_index, n)
      join pgmq.send_batch(v_batch.queue_name, array(select unnest(v_batch.messages)), 0)
           with ordinality as sent(msg_id, n) on sent.n = k.n
     where t.run_id = retry_run.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index;
    v_count := v_count + cardinality(v_batch.steps);
  end loop;

  perform pgflow.start_ready_steps(array[retry_run.run_id]);
  return v_count;
end;
$$;
drop function pgflow.index_queue_priority(text);
drop function pgflow.message_priority(jsonb);
alter table pgflow.steps drop column opt_priority;
alter table pgflow.flows drop column opt_priority;
alter table pgflow.runs drop column priority;

-- ---------------------------------------------------------------- 0019_hand_off_down.sql
-- Frozen migration delta 0019_hand_off, down: no hand-off (workers complete with complete_tasks),
-- and every insert notifies at once again.
drop function pgflow.complete_and_hand_off(items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[], support_generations bigint[], free_slots integer);
drop function pgflow.hand_off_tasks(queue_name text, worker_id uuid, run_ids uuid[], support_flows text[], support_steps text[], support_generations bigint[], free_slots integer);
-- 0020_function_notify_queue_insert.sql
-- Statement-level wake-up for workers: one NOTIFY per inserting statement on a queue table, on the
-- channel PGMQ's own notify-on-insert uses ('pgmq.q_<queue>.INSERT'). PGMQ's row-level trigger
-- updates a throttle row for every message, which costs more than the send itself in batches.
create or replace function pgflow.notify_queue_insert()
returns trigger
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  perform pg_notify('pgmq.' || tg_table_name || '.INSERT', null);
  return null;
end;
$$;

-- ---------------------------------------------------------------- 0018_hot_path_down.sql
-- Frozen migration delta 0018_hot_path, down: back to the 0015 definitions (classify_claim in SQL,
-- the default plan_cache_mode).

-- 0012_function_is_valid_queue_name.sql
-- Queue names pgflow stores: lowercase canonical physical identities that fit PGMQ's 47-character
-- limit (PGMQ lowercases table names, so 'Orders' and 'orders' would address the same tables).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select queue_name is not null
     and length(queue_name) between 1 and 47
     and queue_name ~ '^[a-z0-9_]+$'
$$;
-- 0299_function_classify_claim.sql
-- The first half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks: each
-- distinct message id of the batch with its task, found by persisted identity ((queue_name,
-- message_id) -> task; a lateral LIMIT 1 keeps the plan an index probe per message whatever the
-- table statistics say), and its outcome:
--   <no_task>      no task has this message (start_tasks passes NULL and judges the body next)
--   <unsupported>  the task is not one of the (flow_slug, step_slug) pairs of the support set
--   terminal, started, claimed (a queued task in a started run and step), ineligible (otherwise)
-- The arrays are in task key order, the order in which every other writer locks a run's tasks.
create or replace function pgflow.classify_claim(
  queue_name text, msg_ids bigint[], support_flows text[], support_steps text[], no_task text, unsupported text,
  out ids bigint[], out runs uuid[], out steps text[], out indexes integer[], out outcomes text[]
)
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then classify_claim.no_task
                     when not exists (select 1 from unnest(classify_claim.support_flows, classify_claim.support_steps) as p(flow_slug, step_slug)
                                       where p.flow_slug = t.flow_slug and p.step_slug = t.step_slug) then classify_claim.unsupported
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    from (select distinct unnest(classify_claim.msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = classify_claim.queue_name and t.message_id = i.id
       limit 1
    ) as t on true
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
$$;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) reset plan_cache_mode;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) reset enable_seqscan;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) reset enable_mergejoin;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) reset enable_hashjoin;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) reset plan_cache_mode;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) reset enable_seqscan;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) reset enable_mergejoin;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) reset enable_hashjoin;

-- ---------------------------------------------------------------- 0017_admin_console_down.sql
-- Down delta of 0017_admin_console: restores the definitions of the previous migration.

drop function pgflow.retry_run(uuid);
alter table pgflow.step_tasks drop column attempts_base;

-- ---------------------------------------------------------------- 0016_observability_down.sql
-- Reverse of 0016_observability: runs lose their recorded trace context.

alter table pgflow.runs drop column trace_context;

-- ---------------------------------------------------------------- 0015_consolidation_down.sql
-- Frozen down delta of 0015_consolidation: the definitions of migration 0013 again (the two vt
-- functions, the single-run overloads, both claims as each classified its own batch, the callers of
-- set_vt_batch) and no pinned search_path.

drop function pgflow.classify_claim(text, bigint[], text[], text[], text, text);
drop function pgflow.set_vt_batch(text, bigint[], integer[], text);
-- 0200_function_set_vt_batch.sql as of 0013
-- One statement sets each message's visibility to now + its own offset (seconds).
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[])
returns setof pgmq.message_record
language plpgsql
as $$
begin
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'set_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  return query execute format(
    $q$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
        from unnest($1, $2) as o(msg_id, vt_offset)
       where q.msg_id = o.msg_id
      returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
    $q$,
    pgmq.format_table_name(queue_name, 'q')
  ) using msg_ids, vt_offsets;
end;
$$;
-- 0201_function_extend_vt_batch.sql as of 0013
-- Makes each message hidden for at least its own offset (seconds) from now, in one statement. A
-- message already hidden that long (within a second) is not written: a worker that read its batch
-- with a long enough visibility pays no second update per message when the claim applies the
-- task's timeout.
create or replace function pgflow.extend_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[])
returns void
language plpgsql
as $$
begin
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'extend_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  execute format(
    $q$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
        from unnest($1, $2) as o(msg_id, vt_offset)
       where q.msg_id = o.msg_id
         and q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1)
    $q$,
    pgmq.format_table_name(queue_name, 'q')
  ) using msg_ids, vt_offsets;
end;
$$;
-- 0251_function_maybe_complete_run.sql as of 0013
create or replace function pgflow.maybe_complete_run(run_id uuid)
returns void
language plpgsql
as $$
begin
  perform pgflow.maybe_complete_runs(array[run_id]);
end;
$$;
-- 0261_function_start_ready_steps_single.sql as of 0013
create or replace function pgflow.start_ready_steps(run_id uuid)
returns void
language plpgsql
as $$
begin
  perform pgflow.start_ready_steps(array[run_id]);
end;
$$;
-- 0300_function_start_tasks.sql as of 0013
-- The claim. The whole batch is classified before anything changes, by persisted identity first
-- ((queue_name, message_id) -> task), by body only for messages that match no task:
--   claimed     queued task of this flow in a started run and step: started, one more attempt,
--               visibility = effective timeout + 2 s applied before the rows are returned
--   started     already running elsewhere: untouched, no attempt consumed, visibility deferred to
--               the task's stalled-recovery deadline
--   terminal    the task is finished: message archived (idempotent)
--   ineligible  a queued task whose run or step is not started: untouched
--   missing     the message is no longer in the queue: nothing to do
--   foreign     no task and the body is not pgflow-shaped: archived (the worker warns)
--   fatal       no task but a pgflow-shaped body, or the task belongs to another flow's route or,
--               for a step worker, to another step
-- step_slug is the exact step selector of a step worker (the step's private queue); a plain worker
-- passes NULL and supports every step of its flow. A step-queued flow requires the selector, and the
-- selected step must be routed to queue_name: either mistake raises before anything is read.
-- If any message is fatal, nothing is claimed or archived: every message of the batch is made
-- visible now (outcome 'released' for the others), the subscription (flow_slug, step_slug or '') is
-- paused with reason 'fatal', and the rows are returned rather than an error raised, so the reset
-- and the pause commit. The worker then stops with one error naming the queue and message ids.
create or replace function pgflow.start_tasks(
  queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text default null
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_queue text := lower(queue_name);
  v_mode text;
  v_ids bigint[];
  v_outcomes text[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_unmatched bigint[];
  v_bodies jsonb := '{}'::jsonb;
  v_fatal bigint[];
begin
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = start_tasks.flow_slug;
  if not found then
    raise exception 'flow % does not exist: compile it before claiming its tasks', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode = 'routed' then
    raise exception 'flow % is routed to shared queues: claim with pgflow.start_shared_tasks', quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is null and v_mode = 'step' then
    raise exception 'flow % is step-queued: claim with the exact step selector (start_tasks(..., step_slug))',
      quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is not null and v_mode = 'flow' then
    raise exception 'flow % is a plain flow: its one queue serves every step, so claim without a step selector (step-queued flows, from with_step_queues, take one)',
      quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is not null and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = start_tasks.flow_slug and s.step_slug = start_tasks.step_slug
          and s.queue_name = v_queue) then
    raise exception 'step % of flow % is not routed to queue %: a step worker polls its step''s own queue',
      quote_literal(step_slug), quote_literal(flow_slug), quote_literal(v_queue)
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;

  -- each message's task, looked up by its unique (queue_name, message_id) one at a time (a lateral
  -- LIMIT 1 keeps the plan an index probe per message whatever the table statistics say); the
  -- arrays are in task key order, the order in which every other writer locks a run's tasks
  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then null
                     when t.flow_slug <> start_tasks.flow_slug then 'fatal'
                     when t.step_slug <> coalesce(start_tasks.step_slug, t.step_slug) then 'fatal'
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from (select distinct unnest(msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = v_queue and t.message_id = i.id
       limit 1
    ) as t on true
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug;

  -- only messages without a task are judged by their body
  select array_agg(e.id) into v_unmatched
    from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome is null;
  if v_unmatched is not null then
    execute format('select coalesce(jsonb_object_agg(m.msg_id::text, coalesce(m.message, ''null''::jsonb)), ''{}'') from pgmq.%I as m where m.msg_id = any($1)',
                   pgmq.format_table_name(v_queue, 'q'))
      into v_bodies using v_unmatched;
    v_outcomes := array(
      select case
               when e.outcome is not null then e.outcome
               when not (v_bodies ? e.id::text) then 'missing'
               when pgflow.is_pgflow_message(v_bodies->(e.id::text)) then 'fatal'
               else 'foreign'
             end
        from unnest(v_ids, v_outcomes) with ordinality as e(id, outcome, n)
       order by e.n);
  end if;

  select array_agg(e.id) into v_fatal
    from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome = 'fatal';

  if v_fatal is not null then
    perform pgflow.set_vt_batch(v_queue, array_agg(e.id), array_agg(0))
       from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome <> 'missing';
    insert into pgflow.worker_pauses (flow_slug, step_slug, queue_name, reason, detail)
    values (start_tasks.flow_slug, coalesce(start_tasks.step_slug, ''), v_queue, 'fatal',
            format('unsupported work on queue %s: message ids %s', v_queue,
                   (select string_agg(f::text, ',' order by f) from unnest(v_fatal) as f)))
    on conflict on constraint worker_pauses_pkey do update
      set reason = excluded.reason, detail = excluded.detail, queue_name = excluded.queue_name, paused_at = clock_timestamp();
    return query
      select case when e.outcome in ('fatal', 'missing') then e.outcome else 'released' end,
             e.id, null::text, null::uuid, null::text, null::integer, null::integer, null::jsonb
        from unnest(v_ids, v_outcomes) as e(id, outcome)
       order by e.id;
    return;
  end if;

  return query
    select * from pgflow.claim_classified(v_queue, start_tasks.worker_id, v_ids, v_runs, v_steps, v_indexes,
                                          v_outcomes, array['terminal', 'foreign']);
end;
$$;
alter function pgflow.add_step(flow_slug text, step_slug text, deps_slugs text[], max_attempts integer, base_delay integer, timeout integer, start_delay integer, step_type text, required_input_pattern jsonb, forbidden_input_pattern jsonb, when_unmet text, when_exhausted text, queue_name text) reset search_path;
alter function pgflow.cancel_run(run_id uuid, reason text) reset search_path;
alter function pgflow.check_flow_queues(flow_slug text) reset search_path;
alter function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb) reset search_path;
alter function pgflow.create_flow(flow_slug text, max_attempts integer, base_delay integer, timeout integer, queue_mode text) reset search_path;
alter function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean) reset search_path;
alter function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint) reset search_path;
alter function pgflow.flow_queues(flow_slug text) reset search_path;
alter function pgflow.flow_shape(flow_slug text) reset search_path;
alter function pgflow.is_pgflow_message(message jsonb) reset search_path;
alter function pgflow.is_valid_queue_name(queue_name text) reset search_path;
alter function pgflow.is_valid_slug(slug text) reset search_path;
alter function pgflow.notify_queue_insert() reset search_path;
alter function pgflow.pause_subscription(flow_slug text, step_slug text, reason text, detail text) reset search_path;
alter function pgflow.protocol_version() reset search_path;
alter function pgflow.prune_data_older_than(retention interval) reset search_path;
alter function pgflow.prune_shared_archive(queue_name text, retention interval) reset search_path;
alter function pgflow.queue_objects_problem(queue_name text) reset search_path;
alter function pgflow.rerun(run_id uuid) reset search_path;
alter function pgflow.resolve_queue_spelling(queue_name text) reset search_path;
alter function pgflow.resume_subscription(flow_slug text, step_slug text) reset search_path;
alter function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean) reset search_path;
alter function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid, start_delay integer) reset search_path;
alter function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid) reset search_path;
alter function pgflow.step_queue_name(flow_slug text, step_slug text, step_index integer) reset search_path;
alter function pgflow.subscription_pause(flow_slug text, step_slug text) reset search_path;

-- ---------------------------------------------------------------- 0014_schedules_down.sql
-- Down delta of 0014_schedules: removes the schedules, their ledger and the firing functions.

drop function if exists pgflow.trigger_schedule(text, timestamptz, jsonb);
drop function if exists pgflow.plan_schedules(jsonb);
drop function if exists pgflow.fire_due_schedules(timestamptz, integer, jsonb, interval);
drop function if exists pgflow.due_schedule_names(timestamptz, integer, boolean);
drop function if exists pgflow.schedule_due_ticks(text[], timestamptz, interval);
drop function if exists pgflow.schedule_next_fire_at(text, timestamptz[], integer);
drop function if exists pgflow.schedule_fire_at(text, timestamptz, integer);
drop table if exists pgflow.schedule_ticks;
drop table if exists pgflow.schedules;

-- ---------------------------------------------------------------- 0013_transition_times_down.sql
-- 0240_function_skip_step.sql
-- Skips one step of a started run, and with cascade every step downstream of it. Tasks of skipped
-- steps are terminalized as skipped and their messages archived. The caller holds the run's lock
-- and runs pgflow.cascade afterwards so dependents see the skip.
create or replace function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_msgs bigint[];
begin
  with recursive targets as (
    select skip_step.step_slug as step_slug, skip_step.skip_reason as reason
    union
    select d.step_slug, 'dependency_skipped'
      from targets as tg
      join pgflow.step_states as ss on ss.run_id = skip_step.run_id and ss.step_slug = tg.step_slug
      join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.dep_slug = tg.step_slug
     where skip_step.cascade
  ), skipped as (
    update pgflow.step_states as ss
       set status = 'skipped', skip_reason = tg.reason, skipped_at = now(), remaining_tasks = null
      from (select distinct on (t.step_slug) t.step_slug, t.reason
              from targets as t
             order by t.step_slug, (t.reason = 'dependency_skipped')) as tg
     where ss.run_id = skip_step.run_id and ss.step_slug = tg.step_slug
       and ss.status in ('created', 'started')
    returning ss.step_slug
  ), tasks as (
    update pgflow.step_tasks as t
       set status = 'skipped'
      from skipped as s
     where t.run_id = skip_step.run_id and t.step_slug = s.step_slug and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(t.queue_name), array_agg(t.message_id) into v_queues, v_msgs from tasks as t;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
end;
$$;
-- 0330_function_exhaust_task.sql
-- A task that has no attempt left: it fails, and its step's when_exhausted decides what follows
-- (fail: the step and the run fail; skip: the step is skipped and dependents go on without it;
-- skip-cascade: the step and everything downstream are skipped). The caller holds the run's lock.
-- Returns 'failed' or 'skipped'.
create or replace function pgflow.exhaust_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns text
language plpgsql
as $$
declare
  v_task pgflow.step_tasks;
  v_when text;
begin
  update pgflow.step_tasks as t
     set status = 'failed', failed_at = now(), error_message = exhaust_task.error_message
   where t.run_id = exhaust_task.run_id and t.step_slug = exhaust_task.step_slug
     and t.task_index = exhaust_task.task_index
  returning t.* into v_task;

  perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);

  select s.when_exhausted into v_when
    from pgflow.steps as s where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_when = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed', failed_at = now(), error_message = exhaust_task.error_message
     where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
    perform pgflow.fail_run(exhaust_task.run_id, format('step %s failed: %s', exhaust_task.step_slug, exhaust_task.error_message));
    return 'failed';
  end if;

  update pgflow.step_states as ss
     set error_message = exhaust_task.error_message
   where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
  perform pgflow.skip_step(exhaust_task.run_id, exhaust_task.step_slug, 'handler_failed', v_when = 'skip-cascade');
  perform pgflow.cascade(array[exhaust_task.run_id]);
  return 'skipped';
end;
$$;
-- 0341_function_reject_task.sql
-- Records a failed attempt that no retry can fix (the worker cannot decode the task's input, or
-- encode or store its handler's output): the task fails at once, whatever attempts remain, and its
-- step's when_exhausted decides what follows. Fenced by the claimed `attempt` like fail_task, and
-- locks in the same order (run, task, then the message it archives). Returns 'failed', 'skipped' or
-- 'stale' (not the current claim: nothing changes; the message is archived when the task is
-- already terminal). The failure is appended to the task's attempt_errors.
create or replace function pgflow.reject_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text
)
returns text
language plpgsql
as $$
declare
  v_task pgflow.step_tasks;
  v_current boolean;
begin
  perform 1 from pgflow.runs as r where r.run_id = reject_task.run_id for update;

  select t.* into v_task from pgflow.step_tasks as t
   where t.run_id = reject_task.run_id and t.step_slug = reject_task.step_slug
     and t.task_index = reject_task.task_index
   for update;
  if not found then
    return 'stale';
  end if;

  select v_task.status = 'started' and v_task.attempts_count = reject_task.attempt
         and r.status = 'started' and ss.status = 'started'
    into v_current
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = reject_task.step_slug
   where r.run_id = reject_task.run_id;

  if not coalesce(v_current, false) then
    if v_task.status in ('completed', 'failed', 'skipped', 'cancelled') then
      perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);
    end if;
    return 'stale';
  end if;

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
           'attempt', v_task.attempts_count, 'worker_id', v_task.last_worker_id,
           'error', reject_task.error_message, 'failed_at', now()))
   where t.run_id = reject_task.run_id and t.step_slug = reject_task.step_slug
     and t.task_index = reject_task.task_index;
  return pgflow.exhaust_task(reject_task.run_id, reject_task.step_slug, reject_task.task_index,
                             reject_task.error_message);
end;
$$;
-- 0345_function_release_tasks.sql
-- Gives claims back (a worker shutting down with tasks it could not finish): each item still holding
-- its claim (`attempt`) whose step has attempts left is queued again and its message made visible
-- now ('released'). The attempt stays counted (the handler may have run part of it, and the next
-- claim must carry a new attempt number so this one stays fenced off). A task with no attempt left
-- stays started for stalled-task recovery to exhaust ('kept'). Other items are 'stale'.
create or replace function pgflow.release_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_run_ids uuid[];
  v_released jsonb;
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'release_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt}'
      using errcode = '22023';
  end if;
  select array_agg(distinct (i->>'run_id')::uuid order by (i->>'run_id')::uuid) into v_run_ids
    from jsonb_array_elements(items) as i;
  if v_run_ids is null then
    return;
  end if;
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;

  with released as (
    update pgflow.step_tasks as t
       set status = 'queued', queued_at = now()
      from jsonb_array_elements(items) as i, pgflow.runs as r, pgflow.step_states as ss,
           pgflow.steps as s, pgflow.flows as f
     where t.run_id = (i->>'run_id')::uuid and t.step_slug = i->>'step_slug'
       and t.task_index = (i->>'task_index')::integer
       and t.status = 'started' and t.attempts_count = (i->>'attempt')::integer
       and r.run_id = t.run_id and r.status = 'started'
       and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
       and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug and f.flow_slug = t.flow_slug
       and t.attempts_count < coalesce(s.opt_max_attempts, f.opt_max_attempts)
    returning t.queue_name, t.message_id, t.run_id, t.step_slug, t.task_index
  )
  select coalesce(jsonb_agg(jsonb_build_object('queue_name', rl.queue_name, 'message_id', rl.message_id,
                                               'run_id', rl.run_id, 'step_slug', rl.step_slug,
                                               'task_index', rl.task_index)), '[]'::jsonb)
    into v_released
    from released as rl;

  perform pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]))
     from (select rl->>'queue_name' as queue_name, array_agg((rl->>'message_id')::bigint) as ids
             from jsonb_array_elements(v_released) as rl
            where rl->>'message_id' is not null
            group by rl->>'queue_name') as g;

  return query
    select (i->>'run_id')::uuid, i->>'step_slug', (i->>'task_index')::integer,
           case when v_released @> jsonb_build_array(jsonb_build_object(
                       'run_id', i->>'run_id', 'step_slug', i->>'step_slug',
                       'task_index', (i->>'task_index')::integer))
                  then 'released'
                when t.status = 'started' and t.attempts_count = (i->>'attempt')::integer
                  then 'kept'
                else 'stale' end
      from jsonb_array_elements(items) as i
      left join pgflow.step_tasks as t
        on t.run_id = (i->>'run_id')::uuid and t.step_slug = i->>'step_slug'
       and t.task_index = (i->>'task_index')::integer;
end;
$$;
-- 0350_function_requeue_stalled_tasks.sql
-- Recovers tasks whose worker vanished: started tasks of started runs and steps whose claim is older
-- than the step's effective timeout + 30 s. Each is requeued (visible now) while it has been
-- requeued fewer than 3 times and has attempts left; otherwise it is marked permanently stalled and
-- exhausted like a task out of attempts, so its run still ends. Runs locked by another writer are
-- left for the next pass.
create or replace function pgflow.requeue_stalled_tasks()
returns table (outcome text, task_count integer)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_candidates uuid[];
  v_locked uuid[];
  v_requeued integer := 0;
  v_stalled record;
  v_exhausted integer := 0;
  v_visible integer;
  v_marked integer;
begin
  select array_agg(distinct t.run_id) into v_candidates
    from pgflow.runs as r
    join pgflow.step_tasks as t on t.run_id = r.run_id
    join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join pgflow.flows as f on f.flow_slug = t.flow_slug
   where r.status = 'started' and t.status = 'started'
     and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30);
  if v_candidates is null then
    return query select 'requeued'::text, 0 union all select 'permanently_stalled', 0;
    return;
  end if;

  select array_agg(l.run_id) into v_locked
    from (select r.run_id from pgflow.runs as r
           where r.run_id = any(v_candidates) and r.status = 'started'
           order by r.run_id
             for update skip locked) as l;
  v_locked := coalesce(v_locked, '{}');

  with stalled as (
    select t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
           t.requeued_count < 3 and t.attempts_count < coalesce(s.opt_max_attempts, f.opt_max_attempts) as can_requeue
      from pgflow.step_tasks as t
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = any(v_locked) and t.status = 'started'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
  ), requeued as (
    update pgflow.step_tasks as t
       set status = 'queued', requeued_count = t.requeued_count + 1, last_requeued_at = now(), queued_at = now()
      from stalled as st
     where st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.queue_name, t.message_id
  ), visible as (
    select pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]))
      from (select rq.queue_name, array_agg(rq.message_id) as ids
              from requeued as rq where rq.message_id is not null group by rq.queue_name) as g
  ), marked as (
    update pgflow.step_tasks as t
       set permanently_stalled_at = now()
      from stalled as st
     where not st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.run_id, t.step_slug, t.task_index
  )
  select (select count(*) from requeued)::integer, (select count(*) from visible)::integer,
         (select count(*) from marked)::integer
    into v_requeued, v_visible, v_marked;

  for v_stalled in
    select t.run_id, t.step_slug, t.task_index
      from pgflow.step_tasks as t
     where t.run_id = any(v_locked) and t.status = 'started' and t.permanently_stalled_at is not null
     order by t.run_id, t.step_slug, t.task_index
  loop
    -- an earlier exhaustion in this loop may have skipped the step or failed the run meanwhile
    if exists (select 1 from pgflow.runs as r where r.run_id = v_stalled.run_id and r.status = 'started')
       and exists (select 1 from pgflow.step_tasks as t
                    where t.run_id = v_stalled.run_id and t.step_slug = v_stalled.step_slug
                      and t.task_index = v_stalled.task_index and t.status = 'started') then
      perform pgflow.exhaust_task(v_stalled.run_id, v_stalled.step_slug, v_stalled.task_index,
                                  'permanently stalled: the task was requeued 3 times or ran out of attempts');
      v_exhausted := v_exhausted + 1;
    end if;
  end loop;

  return query select 'requeued'::text, v_requeued union all select 'permanently_stalled', v_exhausted;
end;
$$;
-- 0400_function_pause_subscription.sql
-- Pauses a worker subscription (a flow, or a flow and step): its workers stop polling at their next
-- heartbeat and new ones refuse to start until pgflow.resume_subscription. An operator pause never
-- replaces a fatal one (the fatal detail is what an operator must read before resuming).
create or replace function pgflow.pause_subscription(
  flow_slug text, step_slug text default '', reason text default 'operator', detail text default null
)
returns pgflow.worker_pauses
language plpgsql
as $$
declare
  v_pause pgflow.worker_pauses;
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = pause_subscription.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  if coalesce(step_slug, '') <> '' and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = pause_subscription.flow_slug and s.step_slug = pause_subscription.step_slug) then
    raise exception 'flow % has no step %', quote_literal(flow_slug), quote_literal(step_slug) using errcode = '22023';
  end if;
  insert into pgflow.worker_pauses as p (flow_slug, step_slug, queue_name, reason, detail)
  values (flow_slug, coalesce(step_slug, ''),
          coalesce((select s.queue_name from pgflow.steps as s
                     where s.flow_slug = pause_subscription.flow_slug
                       and s.step_slug = pause_subscription.step_slug), lower(flow_slug)),
          reason, detail)
  on conflict on constraint worker_pauses_pkey do update
    set reason = excluded.reason, detail = excluded.detail, paused_at = now()
    where p.reason <> 'fatal' or excluded.reason = 'fatal';
  select * into v_pause from pgflow.worker_pauses as p
   where p.flow_slug = pause_subscription.flow_slug and p.step_slug = coalesce(pause_subscription.step_slug, '');
  return v_pause;
end;
$$;
alter table pgflow.flows alter column created_at set default now();
alter table pgflow.steps alter column created_at set default now();
alter table pgflow.deps alter column created_at set default now();
alter table pgflow.workers alter column started_at set default now();
alter table pgflow.workers alter column last_heartbeat_at set default now();
alter table pgflow.runs alter column started_at set default now();
alter table pgflow.step_states alter column created_at set default now();
alter table pgflow.step_tasks alter column queued_at set default now();
alter table pgflow.worker_pauses alter column paused_at set default now();
alter table pgflow.shared_queues alter column declared_at set default now();

-- ---------------------------------------------------------------- 0012_poison_paths_down.sql
-- Frozen migration delta 0012_poison_paths, backward.

drop function if exists pgflow.reject_task(uuid, text, integer, integer, text);

-- ---------------------------------------------------------------- 0011_lock_order_down.sql
-- Frozen migration delta 0011_lock_order, backward.

drop function pgflow.cancel_run(uuid, text);
-- 0205_function_archive_messages.sql (as of 0008)
-- Archive the messages of the given tasks, one PGMQ call per queue (each task's queue snapshot).
-- Idempotent: messages already archived or deleted are skipped by PGMQ; a queue whose table is gone
-- has nothing left to archive.
create or replace function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[])
returns void
language plpgsql
as $$
begin
  perform pgmq.archive(g.queue_name, g.ids)
     from (
       select m.queue_name, array_agg(m.msg_id) as ids
         from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
        where m.msg_id is not null
        group by m.queue_name
     ) as g
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(g.queue_name, 'q'))) is not null;
end;
$$;
-- 0280_function_start_flows.sql (as of 0008)
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, run_ids uuid[] default null, start_delay integer default null
)
returns setof pgflow.runs
language plpgsql
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_ids uuid[];
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
      using errcode = '22023';
  end if;
  if start_delay is not null and start_delay < 0 then
    raise exception 'start_flows(%): start_delay must be >= 0 seconds, got %', flow_slug, start_delay
      using errcode = '22023';
  end if;
  if run_ids is not null and cardinality(run_ids) <> jsonb_array_length(inputs) then
    raise exception 'start_flows(%): % inputs but % run ids', flow_slug, jsonb_array_length(inputs), cardinality(run_ids)
      using errcode = '22023';
  end if;

  select s.step_slug into v_root_map
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug and s.step_type = 'map' and s.deps_count = 0
   order by s.step_index limit 1;
  if v_root_map is not null then
    select min(e.n) - 1 into v_bad
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array';
    if v_bad is not null then
      raise exception 'flow %: root map step % needs an array input, but input % is not an array',
        flow_slug, v_root_map, v_bad
        using errcode = '22023';
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, not_before)
    select coalesce(run_ids[e.n], gen_random_uuid()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug),
           case when start_flows.start_delay > 0
                then clock_timestamp() + make_interval(secs => start_flows.start_delay) end
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
    returning runs.run_id, runs.input
  ), states as (
    insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
    select start_flows.flow_slug, nr.run_id, s.step_slug, s.deps_count,
           case when s.step_type = 'single' then 1
                when s.deps_count = 0 then jsonb_array_length(nr.input)
           end
      from new_runs as nr
      cross join pgflow.steps as s
     where s.flow_slug = start_flows.flow_slug
  )
  select array_agg(nr.run_id) into v_ids from new_runs as nr;

  perform pgflow.cascade(v_ids);

  return query
    select r.* from pgflow.runs as r
      join unnest(v_ids) with ordinality as i(run_id, n) on i.run_id = r.run_id
     order by i.n;
end;
$$;
-- 0430_function_cancel_run.sql (as of 0008)
-- Cancels a started run: it ends as failed with reason 'cancelled', its unfinished tasks are
-- cancelled and their messages archived, exactly as a failed run. Returns 'cancelled', or the run's
-- status when it was not started (nothing changes then).
create or replace function pgflow.cancel_run(run_id uuid)
returns text
language plpgsql
as $$
declare
  v_status text;
begin
  select r.status into v_status from pgflow.runs as r where r.run_id = cancel_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', cancel_run.run_id using errcode = 'P0002';
  end if;
  if v_status <> 'started' then
    return v_status;
  end if;
  perform pgflow.fail_run(cancel_run.run_id, 'cancelled');
  return 'cancelled';
end;
$$;
-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed as a
-- short diff by step slug, and "mismatch" says whether the shape, the routing or both differ) or
-- recompiled (the changed flow replaced: its data deleted, then compiled again). Every answer
-- carries the flow's generation (a fresh number per compilation, which a worker's claim compares)
-- and, for a mismatch or a replacement, the flow's runs and unfinished runs (the ones deleted).
-- on_change says what a changed definition may do: 'refuse' (never deletes); 'replace-if-idle'
-- (replaces only when no run is unfinished); 'replace' (an explicit request: replaces, but when
-- confirmed_runs is given, only while the flow has no more runs than the caller showed and had
-- confirmed). Before counting, a replacement locks the flow row, which every start's foreign key
-- check needs: no run can start between the count and the deletion. "refused" names why a
-- replacement did not happen ('unfinished' or 'confirmation'). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint default null)
returns jsonb
language plpgsql
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_route_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
  v_mode text := coalesce(shape->>'queue_mode', 'flow');
  v_route jsonb;
  v_mismatch text[] := '{}';
  v_bad_slug text;
  v_runs bigint;
  v_unfinished bigint;
  v_refused text;
begin
  if on_change is null or on_change not in ('refuse', 'replace-if-idle', 'replace') then
    raise exception 'ensure_flow_compiled(%): on_change must be refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', quote_literal(coalesce(flow_slug, 'NULL')), quote_literal(v_mode)
      using errcode = '22023';
  end if;
  if v_mode = 'step' and jsonb_array_length(shape->'steps') = 0 then
    raise exception 'step-queued flow % has no steps: add steps before with_step_queues', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  select x.e->>'slug' into v_bad_slug from jsonb_array_elements(shape->'steps') as x(e)
   where jsonb_typeof(x.e->'slug') is distinct from 'string' or not pgflow.is_valid_slug(x.e->>'slug')
   limit 1;
  if found then
    raise exception 'invalid step slug % in flow %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_bad_slug, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;

  -- the route: generated (plain, step-queued) or given (routed), every name validated before
  -- anything changes
  if v_mode = 'routed' then
    if jsonb_typeof(shape->'route') is distinct from 'object' then
      raise exception 'routed flow % needs a "route" object {step_slug: queue_name}', quote_literal(flow_slug)
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(x.e->>'slug'), ', ' order by x.n) into v_bad_slug
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n)
     where not (shape->'route') ? (x.e->>'slug');
    if v_bad_slug is not null then
      raise exception 'route of flow % has no queue for step(s) %: give every step exactly one queue',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(r.key), ', ' order by r.key) into v_bad_slug
      from jsonb_object_keys(shape->'route') as r(key)
     where not exists (select 1 from jsonb_array_elements(shape->'steps') as x(e) where x.e->>'slug' = r.key);
    if v_bad_slug is not null then
      raise exception 'route of flow % names %, which are not its steps (steps: %)',
        quote_literal(flow_slug), v_bad_slug,
        (select string_agg(x.e->>'slug', ', ') from jsonb_array_elements(shape->'steps') as x(e))
        using errcode = '22023';
    end if;
    select string_agg(format('%s -> %s', r.key, r.value), ', ' order by r.key) into v_bad_slug
      from jsonb_each(shape->'route') as r(key, value)
     where jsonb_typeof(r.value) <> 'string' or not pgflow.is_valid_queue_name(r.value #>> '{}')
        or position('__' in (r.value #>> '{}')) > 0;
    if v_bad_slug is not null then
      raise exception 'route of flow %: invalid shared queue name(s) %: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    v_route := shape->'route';
  else
    select coalesce(jsonb_object_agg(x.e->>'slug',
             case v_mode when 'step' then pgflow.step_queue_name(flow_slug, x.e->>'slug', (x.n - 1)::integer)
                         else lower(flow_slug) end), '{}'::jsonb)
      into v_route
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
  end if;
  perform pgmq.validate_queue_name(r.queue) from jsonb_each_text(v_route) as r(step, queue);
  if v_mode <> 'routed' and shape ? 'route' and shape->'route' is distinct from v_route then
    raise exception 'flow %: the client generated the route % but the database generates %; deploy pgflow_django code and migrations of the same release',
      quote_literal(flow_slug), shape->'route', v_route
      using errcode = '22023';
  end if;

  if exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
             'slug', e->'slug', 'step_type', coalesce(e->'step_type', '"single"'),
             'deps', coalesce((select jsonb_agg(d order by d) from jsonb_array_elements_text(e->'deps') as d), '[]'::jsonb),
             'when_unmet', coalesce(e->'when_unmet', '"skip"'),
             'when_exhausted', coalesce(e->'when_exhausted', '"fail"'),
             'required_input_pattern', coalesce(e->'required_input_pattern', 'null'),
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null')
           ) order by n), '[]'::jsonb))
      into v_expected
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
    v_found := pgflow.flow_shape(flow_slug);

    if v_expected <> v_found then
      v_mismatch := v_mismatch || 'shape'::text;
    end if;
    select array_agg(diff order by ord) into v_route_differences
      from (
        select 0 as ord, format('queue mode: %s in the definition, %s in the database', v_mode, f.queue_mode) as diff
          from pgflow.flows as f
         where f.flow_slug = ensure_flow_compiled.flow_slug and f.queue_mode <> v_mode
        union all
        select s.step_index + 1, format('route of step %s: queue %s in the definition, %s in the database',
                                        s.step_slug, v_route->>s.step_slug, s.queue_name)
          from pgflow.steps as s
         where s.flow_slug = ensure_flow_compiled.flow_slug and v_route ? s.step_slug
           and v_route->>s.step_slug <> s.queue_name
      ) as d;
    if v_route_differences is not null then
      v_mismatch := v_mismatch || 'routing'::text;
    end if;

    if cardinality(v_mismatch) = 0 then
      v_status := 'verified';
      perform pgflow.check_flow_queues(flow_slug);
      perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                       where v_mode = 'routed' order by 1) as d(q);
    else
      -- a short diff by step slug, database -> definition: removed, added, changed, reordered
      with ex as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_expected->'steps') with ordinality as x(e, n)
      ), fo as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_found->'steps') with ordinality as x(e, n)
      ), common as (
        select ex.slug, ex.n as ex_n, fo.n as fo_n, ex.e as ex_e, fo.e as fo_e from ex join fo using (slug)
      )
      select array_agg(diff order by ord) into v_differences
        from (
          select fo.n as ord, format('- step %s', fo.slug) as diff
            from fo where not exists (select 1 from ex where ex.slug = fo.slug)
          union all
          select 10000 + ex.n, format('+ step %s%s%s', ex.slug,
                   case when ex.e->>'step_type' <> 'single' then format(' (%s)', ex.e->>'step_type') else '' end,
                   case when jsonb_array_length(ex.e->'deps') > 0
                        then format(' depending on %s', (select string_agg(d, ', ') from jsonb_array_elements_text(ex.e->'deps') as d))
                        else '' end)
            from ex where not exists (select 1 from fo where fo.slug = ex.slug)
          union all
          select 20000 + c.ex_n * 10 + k.n, format('~ step %s: %s %s -> %s', c.slug, k.key,
                   coalesce(c.fo_e->k.key #>> '{}', 'null'), coalesce(c.ex_e->k.key #>> '{}', 'null'))
            from common as c
           cross join unnest(array['step_type', 'deps', 'when_unmet', 'when_exhausted',
                                   'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where c.ex_e->k.key is distinct from c.fo_e->k.key
          union all
          select 30000, format('~ step order: %s -> %s', o.found, o.expected)
            from (select string_agg(c.slug, ', ' order by c.fo_n) as found,
                         string_agg(c.slug, ', ' order by c.ex_n) as expected from common as c) as o
           where o.found <> o.expected
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if on_change <> 'refuse' then
        -- starts check their run's flow row (foreign key): holding it, the count below stays true
        perform 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug for update;
      end if;
      select count(*), count(*) filter (where r.status = 'started') into v_runs, v_unfinished
        from pgflow.runs as r where r.flow_slug = ensure_flow_compiled.flow_slug;
      v_refused := case
        when on_change = 'replace-if-idle' and v_unfinished > 0 then 'unfinished'
        when on_change = 'replace' and v_runs > confirmed_runs then 'confirmation'
      end;
      if on_change = 'refuse' or v_refused is not null then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb,
                                  'generation', (select f.generation from pgflow.flows as f
                                                  where f.flow_slug = ensure_flow_compiled.flow_slug),
                                  'runs', v_runs, 'unfinished_runs', v_unfinished, 'refused', v_refused);
      end if;
      perform pgflow.delete_flow_and_data(flow_slug);
      v_status := 'recompiled';
    end if;
  end if;

  if v_status = 'verified' then
    with flow_opts as (
      select f.flow_slug, o.key, o.old_value, (v_options->>o.key)::integer as new_value
        from pgflow.flows as f
       cross join lateral (values ('max_attempts', f.opt_max_attempts), ('base_delay', f.opt_base_delay),
                                  ('timeout', f.opt_timeout)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer
        from jsonb_array_elements(shape->'steps') as x(e)
       where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
         and exists (select 1 from step_opts as so where so.step_slug = s.step_slug)
      returning 1
    )
    select array_agg(u order by u) into v_updated
      from (
        select format('flow %s: %s -> %s', fo.key, coalesce(fo.old_value::text, 'default'), coalesce(fo.new_value::text, 'default')) as u
          from flow_opts as fo
        union all
        select format('step %s %s: %s -> %s', so.step_slug, so.key, coalesce(so.old_value::text, 'default'), coalesce(so.new_value::text, 'default'))
          from step_opts as so
        union all select null from flow_update where false
        union all select null from step_update where false
      ) as changes;
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb),
                              'generation', (select f.generation from pgflow.flows as f
                                              where f.flow_slug = ensure_flow_compiled.flow_slug));
  end if;

  perform pgflow.create_flow(flow_slug, (v_options->>'max_attempts')::integer,
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer, v_mode);
  if v_mode = 'flow' then
    perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
  elsif v_mode = 'routed' then
    perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                     order by 1) as d(q);
  end if;
  for v_step in select e from jsonb_array_elements(shape->'steps') as x(e)
  loop
    perform pgflow.add_step(
      flow_slug, v_step->>'slug',
      coalesce(array(select jsonb_array_elements_text(v_step->'deps')), '{}'),
      (v_step->'options'->>'max_attempts')::integer,
      (v_step->'options'->>'base_delay')::integer,
      (v_step->'options'->>'timeout')::integer,
      (v_step->'options'->>'start_delay')::integer,
      coalesce(v_step->>'step_type', 'single'),
      nullif(v_step->'required_input_pattern', 'null'::jsonb),
      nullif(v_step->'forbidden_input_pattern', 'null'::jsonb),
      coalesce(v_step->>'when_unmet', 'skip'),
      coalesce(v_step->>'when_exhausted', 'fail'),
      case when v_mode = 'routed' then v_route->>(v_step->>'slug') end
    );
  end loop;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;

-- ---------------------------------------------------------------- 0010_pgflow_fidelity_down.sql
-- 0230_function_fail_run.sql (as of 0008)
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_msgs bigint[];
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = now(), error_message = fail_run.error_message
   where r.run_id = fail_run.run_id and r.status = 'started';
  if not found then
    return;
  end if;

  with cancelled as (
    update pgflow.step_tasks as t
       set status = 'cancelled', error_message = coalesce(t.error_message, 'run failed: ' || fail_run.error_message)
     where t.run_id = fail_run.run_id and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
end;
$$;
-- 0250_function_maybe_complete_runs.sql (as of 0008)
-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent.
create or replace function pgflow.maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql
as $$
begin
  with counts as (
    select r.run_id,
           count(ss.step_slug) filter (where ss.status not in ('completed', 'skipped')) as open_steps
      from pgflow.runs as r
      left join pgflow.step_states as ss on ss.run_id = r.run_id
     where r.run_id = any(run_ids) and r.status = 'started'
     group by r.run_id
  )
  update pgflow.runs as r
     set remaining_steps = c.open_steps,
         status = case when c.open_steps = 0 then 'completed' else r.status end,
         completed_at = case when c.open_steps = 0 then now() end,
         output = case when c.open_steps = 0 then (
           select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id and ss.status = 'completed'
              and not exists (select 1 from pgflow.deps as d
                               where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
         ) end
    from counts as c
   where r.run_id = c.run_id
     and (r.remaining_steps <> c.open_steps or c.open_steps = 0);
end;
$$;
-- 0270_function_cascade.sql (as of 0008)
-- Moves the given started runs forward until nothing changes: recounts open dependencies and map
-- sizes of created steps, resolves conditions of ready steps (fail, skip or skip-cascade when
-- unmet), completes ready steps that have no tasks (empty maps), then starts the ready steps that
-- have tasks and completes runs with nothing left. Callers hold the runs' row locks.
create or replace function pgflow.cascade(run_ids uuid[])
returns void
language plpgsql
as $$
declare
  v_unmet record;
  v_changed boolean;
  v_rows integer;
begin
  loop
    v_changed := false;

    -- open dependencies, and the size of a dependent map once its dependency is finished
    with counts as (
      select ss.run_id, ss.step_slug,
             count(d.dep_slug) filter (where dst.status not in ('completed', 'skipped')) as open_deps,
             case when s.step_type = 'map' and s.deps_count = 1
                       and bool_and(dst.status in ('completed', 'skipped'))
                  then max(case when dst.status = 'completed' and jsonb_typeof(dst.output) = 'array'
                                then jsonb_array_length(dst.output) else 0 end)
             end as map_size
        from pgflow.step_states as ss
        join pgflow.runs as r on r.run_id = ss.run_id and r.status = 'started'
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        left join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
        left join pgflow.step_states as dst on dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
       where ss.run_id = any(run_ids) and ss.status = 'created' and s.deps_count > 0
       group by ss.run_id, ss.step_slug, s.step_type, s.deps_count
    )
    update pgflow.step_states as ss
       set remaining_deps = c.open_deps,
           initial_tasks = coalesce(ss.initial_tasks, c.map_size)
      from counts as c
     where ss.run_id = c.run_id and ss.step_slug = c.step_slug
       and (ss.remaining_deps <> c.open_deps or (ss.initial_tasks is null and c.map_size is not null));

    -- conditions of ready steps, matched against the step's input
    for v_unmet in
      select ss.run_id, ss.step_slug, s.when_unmet
        from pgflow.step_states as ss
        join pgflow.runs as r on r.run_id = ss.run_id and r.status = 'started'
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       cross join lateral (
         select case when s.deps_count = 0 then r.input
                     else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                      from pgflow.deps as d
                                      join pgflow.step_states as dst
                                        on dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
                                     where d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
                                       and dst.status = 'completed'), '{}'::jsonb)
                end as step_input
       ) as i
       where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
         and not (coalesce(i.step_input @> s.required_input_pattern, true)
                  and not coalesce(i.step_input @> s.forbidden_input_pattern, false))
       order by ss.run_id, s.step_index
    loop
      if not exists (select 1 from pgflow.runs as r where r.run_id = v_unmet.run_id and r.status = 'started') then
        continue;
      end if;
      if v_unmet.when_unmet = 'fail' then
        update pgflow.step_states as ss
           set status = 'failed', failed_at = now(), error_message = 'condition unmet'
         where ss.run_id = v_unmet.run_id and ss.step_slug = v_unmet.step_slug;
        perform pgflow.fail_run(v_unmet.run_id, format('step %s: condition unmet', v_unmet.step_slug));
      else
        perform pgflow.skip_step(v_unmet.run_id, v_unmet.step_slug, 'condition_unmet', v_unmet.when_unmet = 'skip-cascade');
      end if;
      v_changed := true;
    end loop;

    -- ready steps without tasks (maps over empty arrays) complete at once with an empty output
    update pgflow.step_states as ss
       set status = 'completed', output = '[]'::jsonb, remaining_tasks = 0,
           started_at = now(), completed_at = now()
      from pgflow.runs as r
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks = 0
       and r.run_id = ss.run_id and r.status = 'started';
    get diagnostics v_rows = row_count;
    v_changed := v_changed or v_rows > 0;

    exit when not v_changed;
  end loop;

  perform pgflow.start_ready_steps(run_ids);
  perform pgflow.maybe_complete_runs(run_ids);
end;
$$;
-- 0150_table_step_states.sql (as of 0008): no step status 'cancelled'; cancelled steps read as
-- started again, as the previous code left them (failed runs' counters stay as they are)
update pgflow.step_states as ss set status = 'started' where ss.status = 'cancelled';
alter table pgflow.step_states
  drop constraint step_states_status_check,
  add constraint step_states_status_check
    check (status in ('created', 'started', 'completed', 'failed', 'skipped'));

-- ---------------------------------------------------------------- 0009_shape_safety_down.sql
-- Frozen migration delta 0009_shape_safety, backward.

drop function pgflow.ensure_flow_compiled(text, jsonb, text, bigint);
-- 0390_function_ensure_flow_compiled.sql (as of 0008)
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed, and
-- "mismatch" says whether the shape, the routing or both differ) or recompiled (a mismatch replaced
-- because allow_recompile is set: the flow's data is deleted first). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean default false)
returns jsonb
language plpgsql
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_route_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
  v_mode text := coalesce(shape->>'queue_mode', 'flow');
  v_route jsonb;
  v_mismatch text[] := '{}';
  v_bad_slug text;
begin
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', quote_literal(coalesce(flow_slug, 'NULL')), quote_literal(v_mode)
      using errcode = '22023';
  end if;
  if v_mode = 'step' and jsonb_array_length(shape->'steps') = 0 then
    raise exception 'step-queued flow % has no steps: add steps before with_step_queues', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  select x.e->>'slug' into v_bad_slug from jsonb_array_elements(shape->'steps') as x(e)
   where jsonb_typeof(x.e->'slug') is distinct from 'string' or not pgflow.is_valid_slug(x.e->>'slug')
   limit 1;
  if found then
    raise exception 'invalid step slug % in flow %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_bad_slug, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;

  -- the route: generated (plain, step-queued) or given (routed), every name validated before
  -- anything changes
  if v_mode = 'routed' then
    if jsonb_typeof(shape->'route') is distinct from 'object' then
      raise exception 'routed flow % needs a "route" object {step_slug: queue_name}', quote_literal(flow_slug)
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(x.e->>'slug'), ', ' order by x.n) into v_bad_slug
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n)
     where not (shape->'route') ? (x.e->>'slug');
    if v_bad_slug is not null then
      raise exception 'route of flow % has no queue for step(s) %: give every step exactly one queue',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(r.key), ', ' order by r.key) into v_bad_slug
      from jsonb_object_keys(shape->'route') as r(key)
     where not exists (select 1 from jsonb_array_elements(shape->'steps') as x(e) where x.e->>'slug' = r.key);
    if v_bad_slug is not null then
      raise exception 'route of flow % names %, which are not its steps (steps: %)',
        quote_literal(flow_slug), v_bad_slug,
        (select string_agg(x.e->>'slug', ', ') from jsonb_array_elements(shape->'steps') as x(e))
        using errcode = '22023';
    end if;
    select string_agg(format('%s -> %s', r.key, r.value), ', ' order by r.key) into v_bad_slug
      from jsonb_each(shape->'route') as r(key, value)
     where jsonb_typeof(r.value) <> 'string' or not pgflow.is_valid_queue_name(r.value #>> '{}')
        or position('__' in (r.value #>> '{}')) > 0;
    if v_bad_slug is not null then
      raise exception 'route of flow %: invalid shared queue name(s) %: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    v_route := shape->'route';
  else
    select coalesce(jsonb_object_agg(x.e->>'slug',
             case v_mode when 'step' then pgflow.step_queue_name(flow_slug, x.e->>'slug', (x.n - 1)::integer)
                         else lower(flow_slug) end), '{}'::jsonb)
      into v_route
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
  end if;
  perform pgmq.validate_queue_name(r.queue) from jsonb_each_text(v_route) as r(step, queue);
  if v_mode <> 'routed' and shape ? 'route' and shape->'route' is distinct from v_route then
    raise exception 'flow %: the client generated the route % but the database generates %; deploy pgflow_django code and migrations of the same release',
      quote_literal(flow_slug), shape->'route', v_route
      using errcode = '22023';
  end if;

  if exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
             'slug', e->'slug', 'step_type', coalesce(e->'step_type', '"single"'),
             'deps', coalesce((select jsonb_agg(d order by d) from jsonb_array_elements_text(e->'deps') as d), '[]'::jsonb),
             'when_unmet', coalesce(e->'when_unmet', '"skip"'),
             'when_exhausted', coalesce(e->'when_exhausted', '"fail"'),
             'required_input_pattern', coalesce(e->'required_input_pattern', 'null'),
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null')
           ) order by n), '[]'::jsonb))
      into v_expected
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
    v_found := pgflow.flow_shape(flow_slug);

    if v_expected <> v_found then
      v_mismatch := v_mismatch || 'shape'::text;
    end if;
    select array_agg(diff order by ord) into v_route_differences
      from (
        select 0 as ord, format('queue mode: %s in the definition, %s in the database', v_mode, f.queue_mode) as diff
          from pgflow.flows as f
         where f.flow_slug = ensure_flow_compiled.flow_slug and f.queue_mode <> v_mode
        union all
        select s.step_index + 1, format('route of step %s: queue %s in the definition, %s in the database',
                                        s.step_slug, v_route->>s.step_slug, s.queue_name)
          from pgflow.steps as s
         where s.flow_slug = ensure_flow_compiled.flow_slug and v_route ? s.step_slug
           and v_route->>s.step_slug <> s.queue_name
      ) as d;
    if v_route_differences is not null then
      v_mismatch := v_mismatch || 'routing'::text;
    end if;

    if cardinality(v_mismatch) = 0 then
      v_status := 'verified';
      perform pgflow.check_flow_queues(flow_slug);
      perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                       where v_mode = 'routed' order by 1) as d(q);
    else
      select array_agg(diff order by ord) into v_differences
        from (
          select 0 as ord, format('step count: definition has %s, database has %s',
                                  jsonb_array_length(v_expected->'steps'), jsonb_array_length(v_found->'steps')) as diff
           where jsonb_array_length(v_expected->'steps') <> jsonb_array_length(v_found->'steps')
          union all
          select i * 100 + k.n, format('step %s (%s): %s is %s in the definition, %s in the database',
                                       i, coalesce(ex->>'slug', fo->>'slug'), k.key,
                                       coalesce(ex->k.key, 'null'::jsonb)::text, coalesce(fo->k.key, 'null'::jsonb)::text)
            from generate_series(0, greatest(jsonb_array_length(v_expected->'steps'), jsonb_array_length(v_found->'steps')) - 1) as i
           cross join lateral (select v_expected->'steps'->i as ex, v_found->'steps'->i as fo) as pair
           cross join lateral unnest(array['slug', 'step_type', 'deps', 'when_unmet', 'when_exhausted',
                                           'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where ex->k.key is distinct from fo->k.key
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if not allow_recompile then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb);
      end if;
      perform pgflow.delete_flow_and_data(flow_slug);
      v_status := 'recompiled';
    end if;
  end if;

  if v_status = 'verified' then
    with flow_opts as (
      select f.flow_slug, o.key, o.old_value, (v_options->>o.key)::integer as new_value
        from pgflow.flows as f
       cross join lateral (values ('max_attempts', f.opt_max_attempts), ('base_delay', f.opt_base_delay),
                                  ('timeout', f.opt_timeout)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer
        from jsonb_array_elements(shape->'steps') as x(e)
       where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
         and exists (select 1 from step_opts as so where so.step_slug = s.step_slug)
      returning 1
    )
    select array_agg(u order by u) into v_updated
      from (
        select format('flow %s: %s -> %s', fo.key, coalesce(fo.old_value::text, 'default'), coalesce(fo.new_value::text, 'default')) as u
          from flow_opts as fo
        union all
        select format('step %s %s: %s -> %s', so.step_slug, so.key, coalesce(so.old_value::text, 'default'), coalesce(so.new_value::text, 'default'))
          from step_opts as so
        union all select null from flow_update where false
        union all select null from step_update where false
      ) as changes;
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb));
  end if;

  perform pgflow.create_flow(flow_slug, (v_options->>'max_attempts')::integer,
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer, v_mode);
  if v_mode = 'flow' then
    perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
  elsif v_mode = 'routed' then
    perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                     order by 1) as d(q);
  end if;
  for v_step in select e from jsonb_array_elements(shape->'steps') as x(e)
  loop
    perform pgflow.add_step(
      flow_slug, v_step->>'slug',
      coalesce(array(select jsonb_array_elements_text(v_step->'deps')), '{}'),
      (v_step->'options'->>'max_attempts')::integer,
      (v_step->'options'->>'base_delay')::integer,
      (v_step->'options'->>'timeout')::integer,
      (v_step->'options'->>'start_delay')::integer,
      coalesce(v_step->>'step_type', 'single'),
      nullif(v_step->'required_input_pattern', 'null'::jsonb),
      nullif(v_step->'forbidden_input_pattern', 'null'::jsonb),
      coalesce(v_step->>'when_unmet', 'skip'),
      coalesce(v_step->>'when_exhausted', 'fail'),
      case when v_mode = 'routed' then v_route->>(v_step->>'slug') end
    );
  end loop;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb);
end;
$$;
alter table pgflow.flows drop column generation;

-- ---------------------------------------------------------------- 0008_fast_paths_down.sql
-- Frozen migration delta 0008_fast_paths, backward.

-- 0298_function_claim_classified.sql (as of 0007)
-- The second half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks once they
-- have classified a batch: the arrays hold each message id with its task key and outcome, in task
-- key order (the order every writer locks a run's tasks). Claims the 'claimed' tasks still queued
-- (one more attempt, visibility = effective timeout + 2 s before they are returned), defers the
-- visibility of 'started' ones to their stalled-recovery deadline, archives the messages whose
-- outcome is in `archived`, and returns one claim_record per message.
create or replace function pgflow.claim_classified(
  queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[],
  outcomes text[], archived text[]
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_claimed pgflow.step_tasks[];
begin
  -- the callers checked each task's run and step; a run that fails or a step that is skipped
  -- meanwhile terminalizes its queued tasks, which the status recheck on the locked row sees
  with claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
           last_worker_id = claim_classified.worker_id
      from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     where k.outcome = 'claimed'
       and t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
       and t.status = 'queued'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2))
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug
   having count(*) > 0;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(t.message_id),
                              array_agg(greatest(2, ceil(extract(epoch from
                                t.started_at + make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                                - clock_timestamp())))::integer))
     from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     join pgflow.step_tasks as t
       on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
     join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     join pgflow.flows as f on f.flow_slug = t.flow_slug
    where k.outcome = 'started' and t.status = 'started'
   having count(*) > 0;

  perform pgflow.archive_task_messages(array_agg(claim_classified.queue_name), array_agg(e.id))
     from unnest(ids, outcomes) as e(id, outcome)
    where e.outcome = any(claim_classified.archived)
   having count(*) > 0;

  return query
    select 'claimed'::text, c.message_id, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.attempts_count,
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> c.task_index
             when s.step_type = 'map' then (
               select dst.output -> c.task_index
                 from pgflow.deps as d
                 join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
             when s.deps_count = 0 then r.input
             else coalesce((
               select jsonb_object_agg(d.dep_slug, dst.output)
                 from pgflow.deps as d
                 join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
               '{}'::jsonb)
           end
      from unnest(coalesce(v_claimed, '{}')) as c
      join pgflow.runs as r on r.run_id = c.run_id
      join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
    union all
    select case when e.outcome = 'claimed' then 'started' else e.outcome end,
           e.id, null, null, null, null, null, null
      from unnest(ids, outcomes) as e(id, outcome)
     where e.outcome <> 'claimed'
        or not exists (select 1 from unnest(coalesce(v_claimed, '{}')) as c where c.message_id = e.id)
     order by 2;
end;
$$;
-- 0310_function_complete_tasks.sql (as of 0007)
-- Completes many claims in one call. Each item names the claim it finishes (its attempt); an item
-- that is no longer the current claim changes nothing and reports 'stale' (its message is archived
-- when the task is already terminal), so one stale item never undoes the others. A non-array
-- output feeding a map fails its task, step and run without retry ('failed').
create or replace function pgflow.complete_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_items pgflow.completion_item[];
  v_run_ids uuid[];
  v_bad record;
  v_queues text[];
  v_msgs bigint[];
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'complete_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt, output}'
      using errcode = '22023';
  end if;

  -- parse into an array first: joins then run over unnest() of a variable, which the planner sizes
  -- as a handful of rows (index lookups), not jsonb_array_elements' default of 100 (hash joins that
  -- scan every run)
  select array_agg(row(x.run_id, x.step_slug, x.task_index, x.attempt, coalesce(x.output, 'null'::jsonb),
                       null, null, null, null, null)::pgflow.completion_item
                   order by x.run_id, x.step_slug, x.task_index)
    into v_items
    from jsonb_to_recordset(items) as x(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb);
  if v_items is null then
    return;
  end if;
  select array_agg(distinct c.run_id order by c.run_id) into v_run_ids from unnest(v_items) as c;

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;

  select array_agg(row(y.*)::pgflow.completion_item) into v_items
  from (
  select distinct on (x.run_id, x.step_slug, x.task_index)
         x.run_id, x.step_slug, x.task_index, x.attempt, x.output,
         case when t.status = 'started' and t.attempts_count = x.attempt
                   and r.status = 'started' and ss.status = 'started'
              then 'completed' else 'stale' end as outcome,
         t.flow_slug, t.message_id, s.step_type, t.queue_name
    from unnest(v_items) as x
    left join pgflow.step_tasks as t
      on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
    left join pgflow.runs as r on r.run_id = x.run_id
    left join pgflow.step_states as ss on ss.run_id = x.run_id and ss.step_slug = x.step_slug
    left join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = x.step_slug
   order by x.run_id, x.step_slug, x.task_index,
            coalesce(t.status = 'started' and t.attempts_count = x.attempt, false) desc
  ) as y;

  -- a non-array output feeding a dependent map fails the run; no retry can change the output type
  for v_bad in
    select c.run_id, c.step_slug, c.task_index, min(d.step_slug) as map_slug
      from unnest(v_items) as c
      join pgflow.deps as d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug
      join pgflow.steps as child on child.flow_slug = d.flow_slug and child.step_slug = d.step_slug
     where c.outcome = 'completed' and c.step_type = 'single' and child.step_type = 'map'
       and jsonb_typeof(c.output) <> 'array'
     group by c.run_id, c.step_slug, c.task_index
  loop
    update pgflow.step_tasks as t
       set status = 'failed', failed_at = now(),
           error_message = format('output of %s is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug)
     where t.run_id = v_bad.run_id and t.step_slug = v_bad.step_slug and t.task_index = v_bad.task_index;
    update pgflow.step_states as ss
       set status = 'failed', failed_at = now(),
           error_message = format('output is not an array, but map step %s needs one', v_bad.map_slug)
     where ss.run_id = v_bad.run_id and ss.step_slug = v_bad.step_slug;
    perform pgflow.fail_run(v_bad.run_id,
      format('step %s: output is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug));
    v_items := array(
      select row(c.run_id, c.step_slug, c.task_index, c.attempt, c.output,
                 case when c.run_id <> v_bad.run_id then c.outcome
                      when c.step_slug = v_bad.step_slug and c.task_index = v_bad.task_index then 'failed'
                      when c.outcome = 'completed' then 'stale'
                      else c.outcome end,
                 c.flow_slug, c.message_id, c.step_type, c.queue_name)::pgflow.completion_item
        from unnest(v_items) as c);
  end loop;

  update pgflow.step_tasks as t
     set status = 'completed', output = c.output, completed_at = now()
    from unnest(v_items) as c
   where c.outcome = 'completed'
     and t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index;

  -- completed tasks, late callbacks on terminal tasks and the failed ones all leave the queue
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs
    from unnest(v_items) as c
    left join pgflow.step_tasks as t
      on t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index
   where c.outcome in ('completed', 'failed')
      or t.status in ('completed', 'failed', 'skipped', 'cancelled');
  perform pgflow.archive_task_messages(v_queues, v_msgs);

  with done as (
    select c.run_id, c.step_slug, count(*) as n
      from unnest(v_items) as c
     where c.outcome = 'completed'
     group by c.run_id, c.step_slug
  )
  update pgflow.step_states as ss
     set remaining_tasks = ss.remaining_tasks - done.n,
         status = case when ss.remaining_tasks = done.n then 'completed' else ss.status end,
         completed_at = case when ss.remaining_tasks = done.n then now() end,
         output = case
           when ss.remaining_tasks <> done.n then null
           when s.step_type = 'single' then (
             select t.output from pgflow.step_tasks as t
              where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.task_index = 0)
           else (
             select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
               from pgflow.step_tasks as t
              where t.run_id = ss.run_id and t.step_slug = ss.step_slug)
         end
    from done, pgflow.steps as s
   where ss.run_id = done.run_id and ss.step_slug = done.step_slug
     and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug;

  perform pgflow.cascade(array(select distinct c.run_id from unnest(v_items) as c where c.outcome = 'completed'));

  return query
    select c.run_id, c.step_slug, c.task_index, c.outcome from unnest(v_items) as c
     order by c.run_id, c.step_slug, c.task_index;
end;
$$;
drop function pgflow.extend_vt_batch(text, bigint[], integer[]);

-- ---------------------------------------------------------------- 0007_task_backend_down.sql
-- Frozen migration delta 0007_task_backend, backward.
drop function pgflow.start_flow(text, jsonb, uuid, integer);
drop function pgflow.start_flows(text, jsonb, uuid[], integer);
-- 0208_function_provision_generated_queue.sql (as of 0006)
-- The one path that checks, and creates when absent, a queue generated for a flow (the compiler and
-- add_step both use it). A generated queue is private to one concrete flow: ownership is derived
-- from that flow's persisted definition (its default queue lower(flow_slug) once the flow row
-- exists, or a queue its steps already reference). An existing queue that no definition of this
-- flow owns is never adopted; a name derived or referenced by another flow, a case alias in
-- pgmq.meta, or a queue with missing objects is refused. Nothing is changed before every check
-- passed, and a queue that appears while it is being created is refused too.
create or replace function pgflow.provision_generated_queue(flow_slug text, queue_name text)
returns void
language plpgsql
as $$
declare
  v_other text;
  v_matches text[];
  v_owned boolean;
  v_problem text;
begin
  if not pgflow.is_valid_queue_name(queue_name) then
    raise exception 'generated queue name % of flow % is invalid: queue names are lowercase letters, digits and underscores, at most 47 characters',
      quote_literal(coalesce(queue_name, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  perform pgmq.validate_queue_name(queue_name);
  perform pgmq.acquire_queue_lock(queue_name);

  select f.flow_slug into v_other from pgflow.flows as f
   where lower(f.flow_slug) = provision_generated_queue.queue_name
     and f.flow_slug <> provision_generated_queue.flow_slug
   limit 1;
  if v_other is null then
    select s.flow_slug into v_other from pgflow.steps as s
     where s.queue_name = provision_generated_queue.queue_name
       and s.flow_slug <> provision_generated_queue.flow_slug
     limit 1;
  end if;
  if v_other is not null then
    raise exception 'queue % belongs to flow %, not to flow %: choose another flow slug',
      quote_literal(queue_name), quote_literal(v_other), quote_literal(flow_slug)
      using errcode = '23505';
  end if;

  v_owned := exists (select 1 from pgflow.steps as s
                      where s.flow_slug = provision_generated_queue.flow_slug
                        and s.queue_name = provision_generated_queue.queue_name)
          or exists (select 1 from pgflow.flows as f
                      where f.flow_slug = provision_generated_queue.flow_slug
                        and lower(f.flow_slug) = provision_generated_queue.queue_name);

  select array_agg(m.queue_name::text order by m.queue_name) into v_matches
    from pgmq.meta as m where lower(m.queue_name) = provision_generated_queue.queue_name;

  if cardinality(v_matches) > 1 then
    raise exception 'queue % of flow % is ambiguous: pgmq.meta rows % address the same tables; remove the pgmq.meta row of each alias you do not use (delete from pgmq.meta where queue_name = ...; dropping an alias queue would drop the shared tables)',
      quote_literal(queue_name), quote_literal(flow_slug), array_to_string(v_matches, ', ')
      using errcode = '21000';
  end if;

  if v_matches is not null then
    if not v_owned or exists (select 1 from pgflow.step_tasks as t
                                where t.queue_name = provision_generated_queue.queue_name
                                  and t.flow_slug <> provision_generated_queue.flow_slug) then
      raise exception 'PGMQ queue % already exists but no definition of flow % owns it: pgflow never adopts an existing queue; drop it (pgmq.drop_queue) if it is unused, or choose another flow slug',
        quote_literal(v_matches[1]), quote_literal(flow_slug)
        using errcode = '23505';
    end if;
    v_problem := pgflow.queue_objects_problem(queue_name);
    if v_problem is not null then
      raise exception 'queue % of flow % is malformed: %', quote_literal(queue_name), quote_literal(flow_slug), v_problem
        using errcode = '55000';
    end if;
    return;
  end if;

  if exists (select 1 from pgflow.step_tasks as t where t.queue_name = provision_generated_queue.queue_name) then
    raise exception 'queue % of flow % is missing although tasks reference it; restore it before compiling',
      quote_literal(queue_name), quote_literal(flow_slug)
      using errcode = '55000';
  end if;

  perform pgmq.create(queue_name);
  -- PGMQ's queue lock (held since the checks) keeps this spelling from being created meanwhile; a
  -- case variant created meanwhile would share the tables and shows up as a second metadata row.
  if (select count(*) from pgmq.meta as m where lower(m.queue_name) = provision_generated_queue.queue_name) <> 1
     or pgflow.queue_objects_problem(queue_name) is not null then
    raise exception 'queue % appeared while flow % was being compiled: pgflow never adopts an existing queue; compile again once you know who owns it',
      quote_literal(queue_name), quote_literal(flow_slug)
      using errcode = '40001';
  end if;
  execute format(
    'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
    pgmq.format_table_name(queue_name, 'q'));
end;
$$;
-- 0210_function_create_flow.sql (as of 0006)
-- Idempotent: the flow row is created once (options of an existing flow are left as they are; the
-- compiler updates them). No queue DDL here: add_step and the compiler provision the flow's queues
-- through pgflow.provision_generated_queue. queue_mode 'flow' routes every step to the default queue
-- lower(flow_slug), 'step' gives each step a private generated queue, 'routed' sends each step to
-- the declared shared queue its route names; it is fixed for a concrete slug. A new flow whose default queue name already exists in PGMQ (the name stays reserved in both
-- modes), or that differs only in case from an existing flow, is refused.
create or replace function pgflow.create_flow(
  flow_slug text,
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  queue_mode text default 'flow'
)
returns pgflow.flows
language plpgsql
as $$
declare
  v_flow pgflow.flows;
begin
  if not pgflow.is_valid_slug(flow_slug) then
    raise exception 'invalid flow slug %: use letters, digits and underscores, no leading digit, at most 128 characters, not a reserved word', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if length(flow_slug) > 47 then
    raise exception 'flow slug % is % characters long; its queue name must fit PGMQ''s 47-character limit: choose a shorter slug', quote_literal(flow_slug), length(flow_slug)
      using errcode = '22023';
  end if;
  if max_attempts is not null and max_attempts < 1
     or base_delay is not null and base_delay < 0
     or timeout is not null and timeout < 1 then
    raise exception 'flow %: max_attempts must be >= 1, base_delay >= 0 and timeout >= 1', flow_slug
      using errcode = '22023';
  end if;

  if queue_mode is null or queue_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', flow_slug, quote_literal(coalesce(queue_mode, 'NULL'))
      using errcode = '22023';
  end if;
  if exists (select 1 from pgflow.flows as f
              where f.flow_slug = create_flow.flow_slug and f.queue_mode <> create_flow.queue_mode) then
    raise exception 'flow % exists with queue mode %, not %: a concrete flow''s queue mode is fixed; compile the changed flow under a new slug',
      quote_literal(flow_slug), (select f.queue_mode from pgflow.flows as f where f.flow_slug = create_flow.flow_slug),
      queue_mode
      using errcode = '23505';
  end if;

  if not exists (select 1 from pgflow.flows as f where f.flow_slug = create_flow.flow_slug) then
    if exists (select 1 from pgflow.flows as f where lower(f.flow_slug) = lower(create_flow.flow_slug)) then
      raise exception 'flow slug % differs only in case from the existing flow %, whose queue it would share: choose another slug',
        quote_literal(flow_slug),
        quote_literal((select f.flow_slug from pgflow.flows as f where lower(f.flow_slug) = lower(create_flow.flow_slug) limit 1))
        using errcode = '23505';
    end if;
    if exists (select 1 from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug)) then
      raise exception 'PGMQ queue % already exists, so new flow % would silently adopt it: drop the queue if it is unused (pgmq.drop_queue), or choose another slug',
        quote_literal((select m.queue_name from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug) limit 1)),
        quote_literal(flow_slug)
        using errcode = '23505';
    end if;
  end if;

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, queue_mode)
  values (flow_slug, coalesce(max_attempts, 3), coalesce(base_delay, 1), coalesce(timeout, 60), queue_mode)
  on conflict on constraint flows_pkey do nothing;

  select * into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;

  return v_flow;
end;
$$;
-- 0211_function_provision_shared_queue.sql (as of 0006)
-- The one path that declares, and creates when absent, a shared queue (the compiler calls it for each
-- queue of a routed flow). A queue already declared shared is reused (created again through PGMQ if
-- it went missing). Refused: an invalid name, a name containing '__' (reserved for generated
-- queues), the default queue name of a flow, a queue some plain or step-queued flow routes to, and
-- an existing PGMQ queue (pgmq.list_queues, compared case-insensitively) that pgflow never declared:
-- pgflow never adopts or converts a queue.
create or replace function pgflow.provision_shared_queue(queue_name text)
returns void
language plpgsql
as $$
declare
  v_queue text := queue_name;
  v_listed text[];
  v_owner text;
begin
  if not pgflow.is_valid_queue_name(v_queue) or position('__' in v_queue) > 0 then
    raise exception 'shared queue name % is invalid: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
      quote_literal(coalesce(v_queue, 'NULL'))
      using errcode = '22023';
  end if;
  perform pgmq.validate_queue_name(v_queue);
  perform pg_advisory_xact_lock(hashtextextended('pgflow:shared_queue:' || v_queue, 0));

  select f.flow_slug into v_owner from pgflow.flows as f
   where lower(f.flow_slug) = v_queue limit 1;
  if v_owner is null then
    select s.flow_slug into v_owner from pgflow.steps as s
      join pgflow.flows as f on f.flow_slug = s.flow_slug
     where s.queue_name = v_queue and f.queue_mode <> 'routed' limit 1;
  end if;
  if v_owner is not null then
    raise exception 'queue % is the generated private queue of flow %: choose another shared queue name',
      quote_literal(v_queue), quote_literal(v_owner)
      using errcode = '23505';
  end if;

  select array_agg(l.queue_name::text order by l.queue_name) into v_listed
    from pgmq.list_queues() as l where lower(l.queue_name) = v_queue;
  if cardinality(v_listed) > 1 then
    raise exception 'shared queue % is ambiguous: PGMQ lists % for the same tables; remove the aliases you do not use',
      quote_literal(v_queue), array_to_string(v_listed, ', ')
      using errcode = '21000';
  end if;

  if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue) then
    if v_listed is null then
      perform pgmq.create(v_queue);
      execute format(
        'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
        pgmq.format_table_name(v_queue, 'q'));
    end if;
    return;
  end if;
  if v_listed is not null then
    raise exception 'PGMQ queue % exists but was not declared shared by pgflow: pgflow never adopts an existing queue; choose another name, or drop the queue (pgmq.drop_queue) if it is unused',
      quote_literal(v_listed[1])
      using errcode = '23505';
  end if;

  perform pgmq.create(v_queue);
  insert into pgflow.shared_queues (queue_name) values (v_queue);
  execute format(
    'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
    pgmq.format_table_name(v_queue, 'q'));
end;
$$;
-- 0260_function_start_ready_steps.sql (as of 0006)
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one PGMQ batch per
-- queue and start delay; each task stores that queue as its immutable snapshot. No queue DDL here.
-- The n-th id returned by send_batch belongs to the n-th message sent.
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql
as $$
declare
  v_batches jsonb;
  v_batch record;
begin
  with started as (
    update pgflow.step_states as ss
       set status = 'started', started_at = now(), remaining_tasks = ss.initial_tasks
      from pgflow.runs as r, pgflow.steps as s
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks > 0
       and r.run_id = ss.run_id and r.status = 'started'
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks, coalesce(s.opt_start_delay, 0) as start_delay,
              s.queue_name
  ), messages as (
    select st.queue_name, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message
      from started as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.queue_name, 'start_delay', m.start_delay, 'messages', m.messages))
    into v_batches
    from (select queue_name, start_delay, jsonb_agg(message) as messages
            from messages group by queue_name, start_delay) as m;

  if v_batches is null then
    return;
  end if;

  for v_batch in
    select b->>'queue_name' as queue_name, (b->>'start_delay')::integer as start_delay, b->'messages' as messages
      from jsonb_array_elements(v_batches) as b
  loop
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select m.message->>'flow_slug', (m.message->>'run_id')::uuid, m.message->>'step_slug',
           (m.message->>'task_index')::integer, sent.msg_id, v_batch.queue_name
      from jsonb_array_elements(v_batch.messages) with ordinality as m(message, n)
      join pgmq.send_batch(
             v_batch.queue_name,
             array(select e from jsonb_array_elements(v_batch.messages) as e),
             v_batch.start_delay
           ) with ordinality as sent(msg_id, n) on sent.n = m.n;
  end loop;
end;
$$;
-- 0280_function_start_flows.sql (as of 0006)
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs.
create or replace function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[] default null)
returns setof pgflow.runs
language plpgsql
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_ids uuid[];
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
      using errcode = '22023';
  end if;
  if run_ids is not null and cardinality(run_ids) <> jsonb_array_length(inputs) then
    raise exception 'start_flows(%): % inputs but % run ids', flow_slug, jsonb_array_length(inputs), cardinality(run_ids)
      using errcode = '22023';
  end if;

  select s.step_slug into v_root_map
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug and s.step_type = 'map' and s.deps_count = 0
   order by s.step_index limit 1;
  if v_root_map is not null then
    select min(e.n) - 1 into v_bad
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array';
    if v_bad is not null then
      raise exception 'flow %: root map step % needs an array input, but input % is not an array',
        flow_slug, v_root_map, v_bad
        using errcode = '22023';
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
    select coalesce(run_ids[e.n], gen_random_uuid()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug)
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
    returning runs.run_id, runs.input
  ), states as (
    insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
    select start_flows.flow_slug, nr.run_id, s.step_slug, s.deps_count,
           case when s.step_type = 'single' then 1
                when s.deps_count = 0 then jsonb_array_length(nr.input)
           end
      from new_runs as nr
      cross join pgflow.steps as s
     where s.flow_slug = start_flows.flow_slug
  )
  select array_agg(nr.run_id) into v_ids from new_runs as nr;

  perform pgflow.cascade(v_ids);

  return query
    select r.* from pgflow.runs as r
      join unnest(v_ids) with ordinality as i(run_id, n) on i.run_id = r.run_id
     order by i.n;
end;
$$;
-- 0290_function_start_flow.sql (as of 0006)
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns setof pgflow.runs
language plpgsql
as $$
begin
  if input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end);
end;
$$;
-- 0300_function_start_tasks.sql (as of 0006)
-- The claim. The whole batch is classified before anything changes, by persisted identity first
-- ((queue_name, message_id) -> task), by body only for messages that match no task:
--   claimed     queued task of this flow in a started run and step: started, one more attempt,
--               visibility = effective timeout + 2 s applied before the rows are returned
--   started     already running elsewhere: untouched, no attempt consumed, visibility deferred to
--               the task's stalled-recovery deadline
--   terminal    the task is finished: message archived (idempotent)
--   ineligible  a queued task whose run or step is not started: untouched
--   missing     the message is no longer in the queue: nothing to do
--   foreign     no task and the body is not pgflow-shaped: archived (the worker warns)
--   fatal       no task but a pgflow-shaped body, or the task belongs to another flow's route or,
--               for a step worker, to another step
-- step_slug is the exact step selector of a step worker (the step's private queue); a plain worker
-- passes NULL and supports every step of its flow. A step-queued flow requires the selector, and the
-- selected step must be routed to queue_name: either mistake raises before anything is read.
-- If any message is fatal, nothing is claimed or archived: every message of the batch is made
-- visible now (outcome 'released' for the others), the subscription (flow_slug, step_slug or '') is
-- paused with reason 'fatal', and the rows are returned rather than an error raised, so the reset
-- and the pause commit. The worker then stops with one error naming the queue and message ids.
create or replace function pgflow.start_tasks(
  queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text default null
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_queue text := lower(queue_name);
  v_mode text;
  v_ids bigint[];
  v_outcomes text[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_unmatched bigint[];
  v_bodies jsonb := '{}'::jsonb;
  v_fatal bigint[];
begin
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = start_tasks.flow_slug;
  if not found then
    raise exception 'flow % does not exist: compile it before claiming its tasks', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode = 'routed' then
    raise exception 'flow % is routed to shared queues: claim with pgflow.start_shared_tasks', quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is null and v_mode = 'step' then
    raise exception 'flow % is step-queued: claim with the exact step selector (start_tasks(..., step_slug))',
      quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is not null and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = start_tasks.flow_slug and s.step_slug = start_tasks.step_slug
          and s.queue_name = v_queue) then
    raise exception 'step % of flow % is not routed to queue %: a step worker polls its step''s own queue',
      quote_literal(step_slug), quote_literal(flow_slug), quote_literal(v_queue)
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;

  -- each message's task, looked up by its unique (queue_name, message_id) one at a time (a lateral
  -- LIMIT 1 keeps the plan an index probe per message whatever the table statistics say); the
  -- arrays are in task key order, the order in which every other writer locks a run's tasks
  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then null
                     when t.flow_slug <> start_tasks.flow_slug then 'fatal'
                     when t.step_slug <> coalesce(start_tasks.step_slug, t.step_slug) then 'fatal'
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from (select distinct unnest(msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = v_queue and t.message_id = i.id
       limit 1
    ) as t on true
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug;

  -- only messages without a task are judged by their body
  select array_agg(e.id) into v_unmatched
    from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome is null;
  if v_unmatched is not null then
    execute format('select coalesce(jsonb_object_agg(m.msg_id::text, coalesce(m.message, ''null''::jsonb)), ''{}'') from pgmq.%I as m where m.msg_id = any($1)',
                   pgmq.format_table_name(v_queue, 'q'))
      into v_bodies using v_unmatched;
    v_outcomes := array(
      select case
               when e.outcome is not null then e.outcome
               when not (v_bodies ? e.id::text) then 'missing'
               when pgflow.is_pgflow_message(v_bodies->(e.id::text)) then 'fatal'
               else 'foreign'
             end
        from unnest(v_ids, v_outcomes) with ordinality as e(id, outcome, n)
       order by e.n);
  end if;

  select array_agg(e.id) into v_fatal
    from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome = 'fatal';

  if v_fatal is not null then
    perform pgflow.set_vt_batch(v_queue, array_agg(e.id), array_agg(0))
       from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome <> 'missing';
    insert into pgflow.worker_pauses (flow_slug, step_slug, queue_name, reason, detail)
    values (start_tasks.flow_slug, coalesce(start_tasks.step_slug, ''), v_queue, 'fatal',
            format('unsupported work on queue %s: message ids %s', v_queue,
                   (select string_agg(f::text, ',' order by f) from unnest(v_fatal) as f)))
    on conflict on constraint worker_pauses_pkey do update
      set reason = excluded.reason, detail = excluded.detail, queue_name = excluded.queue_name, paused_at = now();
    return query
      select case when e.outcome in ('fatal', 'missing') then e.outcome else 'released' end,
             e.id, null::text, null::uuid, null::text, null::integer, null::integer, null::jsonb
        from unnest(v_ids, v_outcomes) as e(id, outcome)
       order by e.id;
    return;
  end if;

  return query
    select * from pgflow.claim_classified(v_queue, start_tasks.worker_id, v_ids, v_runs, v_steps, v_indexes,
                                          v_outcomes, array['terminal', 'foreign']);
end;
$$;
-- 0302_function_start_shared_tasks.sql (as of 0006)
-- The claim on a shared queue, for a worker that supports the exact (flow_slug, step_slug) pairs
-- given as two parallel arrays. Classified by persisted identity only ((queue_name, message_id) ->
-- task); bodies are never read:
--   claimed      a queued task of a supported pair in a started run and step: started, one more
--                attempt, visibility = effective timeout + 2 s before the rows are returned
--   started      already running elsewhere: untouched, no attempt consumed, visibility deferred to
--                the task's stalled-recovery deadline
--   terminal     a supported task that is finished: message archived (idempotent)
--   ineligible   a supported queued task whose run or step is not started: untouched
--   unmatched    no task has this message: preserved as read (it recurs after its visibility
--                timeout); the worker warns with queue and message ids
--   unsupported  the task is outside the support set: not claimed, mutated or archived; the worker
--                warns
-- Nothing stops the worker: valid work in the batch is claimed whatever else it holds.
create or replace function pgflow.start_shared_tasks(
  queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_queue text := lower(queue_name);
  v_ids bigint[];
  v_outcomes text[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  if not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue) then
    raise exception 'queue % is not a shared queue declared by pgflow: claim a private queue with pgflow.start_tasks',
      quote_literal(coalesce(queue_name, 'NULL'))
      using errcode = '22023';
  end if;
  if cardinality(support_flows) is distinct from cardinality(support_steps) then
    raise exception 'start_shared_tasks: support_flows and support_steps must be parallel arrays of the same length'
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;

  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then 'unmatched'
                     when not exists (select 1 from unnest(support_flows, support_steps) as p(flow_slug, step_slug)
                                       where p.flow_slug = t.flow_slug and p.step_slug = t.step_slug) then 'unsupported'
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from (select distinct unnest(msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = v_queue and t.message_id = i.id
       limit 1
    ) as t on true
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug;

  return query
    select * from pgflow.claim_classified(v_queue, start_shared_tasks.worker_id, v_ids, v_runs, v_steps, v_indexes,
                                          v_outcomes, array['terminal']);
end;
$$;
-- 0340_function_fail_task.sql (as of 0006)
-- Records a failed attempt of the claim `attempt`. While attempts remain the task is queued again
-- and its message becomes visible after floor(base_delay * 2^attempts) seconds, or after the
-- handler-chosen retry_delay (attempt accounting is the same either way). Returns 'retrying',
-- 'failed', 'skipped' (exhausted, per when_exhausted) or 'stale' (not the current claim: nothing
-- changes; the message is archived when the task is already terminal).
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text,
  retry_delay integer default null
)
returns text
language plpgsql
as $$
declare
  v_task pgflow.step_tasks;
  v_current boolean;
  v_max_attempts integer;
  v_delay integer;
begin
  if retry_delay is not null and retry_delay < 0 then
    raise exception 'fail_task: retry_delay must be >= 0 seconds, got %', retry_delay using errcode = '22023';
  end if;

  perform 1 from pgflow.runs as r where r.run_id = fail_task.run_id for update;

  select t.* into v_task from pgflow.step_tasks as t
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
   for update;
  if not found then
    return 'stale';
  end if;

  select v_task.status = 'started' and v_task.attempts_count = fail_task.attempt
         and r.status = 'started' and ss.status = 'started'
    into v_current
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = fail_task.step_slug
   where r.run_id = fail_task.run_id;

  if not coalesce(v_current, false) then
    if v_task.status in ('completed', 'failed', 'skipped', 'cancelled') then
      perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);
    end if;
    return 'stale';
  end if;

  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(fail_task.retry_delay,
                  least(floor(coalesce(s.opt_base_delay, f.opt_base_delay) * power(2, v_task.attempts_count)), 2147483647)::integer)
    into v_max_attempts, v_delay
    from pgflow.steps as s join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count < v_max_attempts then
    update pgflow.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = now()
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
    perform pgflow.set_vt_batch(v_task.queue_name, array[v_task.message_id], array[v_delay]);
    return 'retrying';
  end if;

  return pgflow.exhaust_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index, fail_task.error_message);
end;
$$;
-- 0370_function_delete_flow_and_data.sql (as of 0006)
-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it (a plain flow's default queue, a step-queued flow's private step queues, with
-- their archives), then the flow row last. Every queue of the persisted route (pgflow.flow_queues)
-- is validated first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- are locked before the queues (the order every writer uses). Messages are not archived one by one:
-- dropping a queue drops its table and archive together. Serialised with compilation by the
-- per-flow advisory lock. Shared queues (pgflow.shared_queues) are never dropped: only this flow's
-- live messages on them are deleted, found through its task snapshots.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_queue text;
  v_spellings text[] := '{}';
  v_problem text;
  v_other text;
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  perform 1 from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug order by r.run_id for update;

  select coalesce(array_agg(distinct q order by q), '{}') into v_queues
    from pgflow.flow_queues(delete_flow_and_data.flow_slug) as q;

  foreach v_queue in array v_queues loop
    select s.flow_slug into v_other from pgflow.steps as s
     where s.queue_name = v_queue and s.flow_slug <> delete_flow_and_data.flow_slug limit 1;
    if v_other is not null then
      raise exception 'cannot delete flow %: its queue % is also used by flow %; nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), quote_literal(v_other) using errcode = '55000';
    end if;
    if not exists (select 1 from pgmq.meta as m where lower(m.queue_name) = v_queue)
       and not exists (select 1 from pgflow.steps as s
                        where s.flow_slug = delete_flow_and_data.flow_slug and s.queue_name = v_queue) then
      continue;
    end if;
    begin
      v_spellings := v_spellings || pgflow.resolve_queue_spelling(v_queue);
    exception when others then
      raise exception 'cannot delete flow %: %; nothing was deleted', quote_literal(flow_slug), sqlerrm
        using errcode = '55000';
    end;
    v_problem := pgflow.queue_objects_problem(v_queue);
    if v_problem is not null then
      raise exception 'cannot delete flow %: queue % is malformed (%); repair or drop it by hand, nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), v_problem using errcode = '55000';
    end if;
  end loop;

  -- on shared queues, only this flow's own messages go (found through its task snapshots); the
  -- queues, their archives and every other message stay
  perform pgmq.delete(t.queue_name, array_agg(t.message_id order by t.message_id))
     from pgflow.step_tasks as t
     join pgflow.shared_queues as sq on sq.queue_name = t.queue_name
    where t.flow_slug = delete_flow_and_data.flow_slug and t.message_id is not null
      and t.status in ('queued', 'started')
    group by t.queue_name;

  delete from pgflow.step_tasks as t
   where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p where p.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
end;
$$;
alter table pgflow.step_tasks drop column attempt_errors;
alter table pgflow.runs drop column not_before;
