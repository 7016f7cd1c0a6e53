-- Frozen migration delta 0032_archive_partitions (loaded by pgflow_django/migrations/0032_archive_partitions.py):
-- the PGMQ archives of pgflow's queues can be partitioned by archived_at on the history's intervals
-- (pgflow.partition_queue_archive), with their partitions kept ready by the workers
-- (pgflow.create_archive_partitions) and old ones dropped by retention (pgflow.prune_queue_archive).
-- pgflow_partition does it for a new partitioning; `pgflow_partition --archives`
-- (pgflow.partition_archives) for a history partitioned before this migration. pgflow.engine_queues
-- names the queues once for these and pgflow.write_queue_access.

-- 0187_table_history_partitioning.sql
alter table pgflow.history_partitioning add column archives boolean not null default false;

-- 0196_function_engine_queues.sql
-- Every queue the engine sends to: plain flows' default queues, the steps' queues and the declared
-- shared queues. The queues pgflow writes static SQL for (write_queue_access) and partitions the
-- archives of (create_history_partitions).
create or replace function pgflow.engine_queues()
returns setof text
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select s.queue_name from pgflow.steps as s
  union
  select lower(f.flow_slug) from pgflow.flows as f where f.queue_mode = 'flow'
  union
  select sq.queue_name from pgflow.shared_queues as sq
$$;

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

-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. Archives of shared queues are left alone: several flows'
-- messages meet there, so their retention is queue-wide (pgflow.prune_shared_archive)
-- (a worker that sent a heartbeat in the last 10 minutes is never pruned, whatever the retention).
-- A partitioned history (pgflow.partition_history) drops whole partitions instead: every interval
-- that ended before the cutoff and whose runs all finished before it goes with one DROP TABLE of
-- its three partitions (reruns naming its runs get rerun_of = NULL); the rest (the default
-- partitions, which hold the ids that are not time-ordered, and an old interval that still has a run
-- in progress or finished later) is deleted row by row as before, reading only the partitions that
-- can hold such runs. 'partitions' counts the intervals dropped. A partitioned archive drops its
-- old partitions too (pgflow.prune_queue_archive). The rows go by a join with the
-- pruned ids (a hash join or index probes), not by `= any(array)`, which tests every row against
-- every id.
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
  v_dropped integer := 0;
  v_partitioned boolean;
  v_part record;
  v_unfinished bigint;
  v_dropped_runs bigint := 0;
  v_dropped_states bigint := 0;
  v_dropped_tasks bigint := 0;
  v_upper uuid;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  v_partitioned := exists (select 1 from pgflow.history_partitioning);
  if v_partitioned then
    for v_part in
      select substr(c.relname, 6) as suffix, pgflow.uuid_v7_bound(lo) as lo, pgflow.uuid_v7_bound(lo + hp.partition_interval) as hi
        from pg_inherits as inh
        join pg_class as c on c.oid = inh.inhrelid
        cross join pgflow.history_partitioning as hp
        cross join lateral (select to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC' as lo) as b
       where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$'
         and b.lo + hp.partition_interval <= v_cutoff
       order by c.relname
    loop
      execute format('select count(*), count(*) filter (where status not in (''completed'', ''failed'')'
                     ' or coalesce(completed_at, failed_at) >= $1) from pgflow.%I', 'runs_' || v_part.suffix)
        into v_count, v_unfinished using v_cutoff;
      continue when v_unfinished > 0;
      v_dropped_runs := v_dropped_runs + v_count;
      execute format('select count(*) from pgflow.%I', 'step_states_' || v_part.suffix) into v_count;
      v_dropped_states := v_dropped_states + v_count;
      execute format('select count(*) from pgflow.%I', 'step_tasks_' || v_part.suffix) into v_count;
      v_dropped_tasks := v_dropped_tasks + v_count;
      update pgflow.runs as r set rerun_of = null where r.rerun_of >= v_part.lo and r.rerun_of < v_part.hi;
      execute format('drop table pgflow.%I, pgflow.%I, pgflow.%I',
                     'step_tasks_' || v_part.suffix, 'step_states_' || v_part.suffix, 'runs_' || v_part.suffix);
      v_dropped := v_dropped + 1;
    end loop;
    -- time-ordered ids of runs finished before the cutoff sort below its bound; the others are in the
    -- default partitions, which no range excludes
    select pgflow.uuid_v7_bound(coalesce(max(to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC'
                                             + hp.partition_interval), v_cutoff))
      into v_upper
      from pg_inherits as inh join pg_class as c on c.oid = inh.inhrelid cross join pgflow.history_partitioning as hp
     where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$';
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where (r.run_id < pgflow.uuid_v7_bound(v_cutoff) or r.run_id >= v_upper)
       and r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
    update pgflow.runs as r set rerun_of = null from unnest(v_runs) as p(run_id) where r.rerun_of = p.run_id;
  else
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
  end if;

  delete from pgflow.step_tasks as t using unnest(v_runs) as p(run_id) where t.run_id = p.run_id;
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states as ss using unnest(v_runs) as p(run_id) where ss.run_id = p.run_id;
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r using unnest(v_runs) as p(run_id) where r.run_id = p.run_id;

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
    v_archived := v_archived + pgflow.prune_queue_archive(v_queue, v_cutoff);
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs) + v_dropped_runs, 'step_states', v_states + v_dropped_states,
                            'step_tasks', v_tasks + v_dropped_tasks, 'workers', v_workers,
                            'archived_messages', v_archived, 'partitions', v_dropped);
end;
$$;

-- 0362_function_prune_queue_archive.sql
-- Retention of one queue's archive: removes its archived messages older than `cutoff` and returns
-- how many. A partitioned archive (pgflow.partition_queue_archive) first drops every partition
-- whose range ends at or before the cutoff, a_<queue>_old included once its last interval has
-- passed (its rows are counted for the result, then one DROP TABLE: no row-level WAL, no dead rows);
-- the rest (the default partition and the interval holding the cutoff) is deleted row by row.
create or replace function pgflow.prune_queue_archive(queue_name text, cutoff timestamptz)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive regclass := to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'a')));
  v_part record;
  v_count bigint;
  v_pruned bigint := 0;
begin
  if v_archive is null then
    return 0;
  end if;
  for v_part in
    select c.relname
      from pg_inherits as inh
      join pg_class as c on c.oid = inh.inhrelid
     where inh.inhparent = v_archive
       and (regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$TO \('([^']+)'\)$re$))[1]::timestamptz <= cutoff
     order by c.relname
  loop
    execute format('select count(*) from pgmq.%I', v_part.relname) into v_count;
    execute format('drop table pgmq.%I', v_part.relname);
    v_pruned := v_pruned + v_count;
  end loop;
  execute format('delete from %s where archived_at < $1', v_archive) using cutoff;
  get diagnostics v_count = row_count;
  return v_pruned + v_count;
end;
$$;

-- 0365_function_prune_shared_archive.sql
-- Queue-wide retention of one declared shared queue's archive: deletes its archived messages older
-- than now - retention, whichever flow they belonged to (pgflow.prune_queue_archive: a partitioned
-- archive drops its old partitions). Returns how many were removed.
create or replace function pgflow.prune_shared_archive(queue_name text, retention interval)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
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
  return pgflow.prune_queue_archive(queue_name, now() - retention);
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
-- open sessions compile them again (a compiled function keeps the row types it saw). The PGMQ
-- archives of pgflow's queues are partitioned on the same intervals (pgflow.partition_queue_archive),
-- after the history tables' locks: every writer takes a history table before an archive. Returns the
-- statements in order; runs them only when `apply` (otherwise it changes nothing: the plan
-- pgflow_partition prints).
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
  v_steps := v_steps || format('insert into pgflow.history_partitioning (partition_interval, ahead, archives) values (%L, %s, true)',
                               partition_interval, ahead);
  for v_row in
    select e.queue_name from pgflow.engine_queues() as e(queue_name)
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
     order by e.queue_name
  loop
    v_steps := v_steps || format('select pgflow.partition_queue_archive(%L)', v_row.queue_name);
  end loop;
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
-- others return 0); returns how many intervals it created, 0 on a plain install. With `archives`
-- on, it also partitions the archive of an engine queue that is still a plain table (a queue made
-- since: pgflow.partition_queue_archive, skipped while the archive is busy) and keeps each
-- archive's partitions ready (pgflow.create_archive_partitions). Cheap when nothing is missing: the
-- worker calls it with its stalled recovery.
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
  v_archives boolean;
  v_queue text;
begin
  select hp.partition_interval, hp.ahead, hp.archives into v_interval, v_ahead, v_archives
    from pgflow.history_partitioning as hp;
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
    v_missing := '{}';
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

  -- the archives after the history tables, the order in which every writer takes them
  if v_archives then
    for v_queue in
      select e.queue_name from pgflow.engine_queues() as e(queue_name)
       where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
       order by e.queue_name
    loop
      perform pgflow.partition_queue_archive(v_queue, wait => false);
      perform pgflow.create_archive_partitions(v_queue, since, through);
    end loop;
  end if;
  return v_created;
end;
$$;

-- 0473_function_create_archive_partitions.sql
-- Keeps a partitioned archive's partitions ready: creates every missing partition of the queue's
-- archive (pgmq.a_<queue>, range-partitioned by archived_at) from the interval holding now (or
-- `since`, when earlier) through `ahead` intervals after it (and through `through`, when later), on
-- the history's intervals. Partition a_<queue>_pYYYYMMDD gets the archive's columns, a primary key
-- on msg_id (as PGMQ's archive has) and the parent's archived_at index. Intervals below the upper
-- bound of a_<queue>_old (the archive as it was before partitioning) are left to it. Archived
-- messages of a new partition's range that reached the default partition meanwhile move into it
-- first. One caller at a time creates (create_history_partitions' advisory lock; the others return
-- 0). Returns how many partitions it created: 0 for a plain archive or when none is missing (cheap,
-- no lock taken then: the worker calls it with its stalled recovery).
create or replace function pgflow.create_archive_partitions(
  queue_name text, since timestamptz default null, through timestamptz default null
)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive text := pgmq.format_table_name(queue_name, 'a');
  v_interval interval;
  v_ahead integer;
  v_floor timestamptz;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_part text;
  v_created integer := 0;
begin
  select hp.partition_interval, hp.ahead into v_interval, v_ahead from pgflow.history_partitioning as hp;
  if v_interval is null
     or (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) is distinct from 'p' then
    return 0;
  end if;
  select (regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$TO \('([^']+)'\)$re$))[1]::timestamptz into v_floor
    from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive || '_old'));
  v_start := greatest(date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00'),
                      coalesce(v_floor, '-infinity'));
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgmq.%I', v_archive || '_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    return 0;
  end if;

  foreach v_start in array v_missing loop
    v_part := v_archive || '_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgmq.%I', v_part)) is not null;
    execute format('create table pgmq.%I (like pgmq.%I including defaults including storage)', v_part, v_archive);
    execute format('alter table pgmq.%I add primary key (msg_id)', v_part);
    execute format('with moved as (delete from pgmq.%I where archived_at >= $1 and archived_at < $2 returning *)'
                   ' insert into pgmq.%I select * from moved', v_archive || '_default', v_part)
      using v_start, v_start + v_interval;
    execute format('alter table pgmq.%I attach partition pgmq.%I for values from (%L) to (%L)',
                   v_archive, v_part, v_start, v_start + v_interval);
    v_created := v_created + 1;
  end loop;
  return v_created;
end;
$$;

-- 0474_function_partition_queue_archive.sql
-- Partitions one queue's PGMQ archive by archived_at, on the history's intervals, so that retention
-- drops whole partitions of archived messages instead of deleting them. No row is copied: the
-- archive as it was becomes the partition a_<queue>_old, holding every time up to the end of the
-- interval of its newest message (an empty one is dropped instead), beside a default partition and
-- the partitions create_archive_partitions keeps ready. The parent has the archive's columns and
-- PGMQ's archived_at index (by PGMQ's name, so pgmq.create finds it); primary keys on msg_id are per
-- partition, since a key of a table partitioned by time must hold the time. PGMQ's statements and
-- pgflow.queue_access insert into the parent unchanged. Attaching a_<queue>_old reads it once, under
-- the archive's ACCESS EXCLUSIVE lock; with `wait` false the lock is tried and a busy archive is
-- left for a later call. Returns true when it partitioned the archive; false when the queue has no
-- archive, it is partitioned already, it has no archived_at (not PGMQ's layout), or the lock was
-- busy.
create or replace function pgflow.partition_queue_archive(queue_name text, wait boolean default true)
returns boolean
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive text := pgmq.format_table_name(queue_name, 'a');
  v_interval interval;
  v_newest timestamptz;
begin
  select hp.partition_interval into v_interval from pgflow.history_partitioning as hp;
  if v_interval is null then
    raise exception 'the pgflow history is not partitioned: run pgflow_partition first' using errcode = '55000';
  end if;
  if (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) is distinct from 'r'
     or not exists (select 1 from pg_attribute as a
                     where a.attrelid = to_regclass(format('pgmq.%I', v_archive)) and a.attname = 'archived_at'
                       and a.atttypid = 'timestamptz'::regtype and not a.attisdropped) then
    return false;
  end if;
  if wait then
    execute format('lock table pgmq.%I in access exclusive mode', v_archive);
  else
    begin
      execute format('lock table pgmq.%I in access exclusive mode nowait', v_archive);
    exception when lock_not_available then
      return false;
    end;
  end if;
  if (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) <> 'r' then
    return false;  -- partitioned by another caller while this one waited for the lock
  end if;

  execute format('select max(archived_at) from pgmq.%I', v_archive) into v_newest;
  execute format('alter table pgmq.%I rename to %I', v_archive, v_archive || '_old');
  if to_regclass(format('pgmq.%I', 'archived_at_idx_' || queue_name)) is not null then
    execute format('alter index pgmq.%I rename to %I', 'archived_at_idx_' || queue_name, v_archive || '_old_at_idx');
  end if;
  execute format('create table pgmq.%I (like pgmq.%I including defaults including storage including comments)'
                 ' partition by range (archived_at)', v_archive, v_archive || '_old');
  execute format('create index %I on pgmq.%I (archived_at)', 'archived_at_idx_' || queue_name, v_archive);
  if v_newest is null then
    execute format('drop table pgmq.%I', v_archive || '_old');
  else
    execute format('alter table pgmq.%I attach partition pgmq.%I for values from (minvalue) to (%L)', v_archive,
                   v_archive || '_old',
                   date_bin(v_interval, v_newest, timestamptz '2000-01-03 00:00:00+00') + v_interval);
  end if;
  execute format('create table pgmq.%I partition of pgmq.%I default', v_archive || '_default', v_archive);
  execute format('alter table pgmq.%I add primary key (msg_id)', v_archive || '_default');
  perform pgflow.create_archive_partitions(queue_name);
  return true;
end;
$$;

-- 0476_function_partition_archives.sql
-- Partitions the PGMQ archives of pgflow's queues on a history partitioned before archives were
-- (pgflow.partition_queue_archive for each, then `archives` on, so that workers partition new
-- queues' archives too). Returns the statements in order; runs them only when `apply` (otherwise
-- it changes nothing: the plan `pgflow_partition --archives` prints).
create or replace function pgflow.partition_archives(apply boolean)
returns setof text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_steps text[] := array['update pgflow.history_partitioning set archives = true'];
  v_queue text;
  v_step text;
begin
  if not exists (select 1 from pgflow.history_partitioning) then
    raise exception 'the pgflow history is not partitioned: run pgflow_partition first (it partitions the archives too)'
      using errcode = '55000';
  end if;
  if exists (select 1 from pgflow.history_partitioning as hp where hp.archives) then
    raise exception 'the queue archives are already partitioned' using errcode = '55000';
  end if;
  for v_queue in
    select e.queue_name from pgflow.engine_queues() as e(queue_name)
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
     order by e.queue_name
  loop
    v_steps := v_steps || format('select pgflow.partition_queue_archive(%L)', v_queue);
  end loop;
  foreach v_step in array v_steps loop
    if apply then
      execute v_step;
    end if;
    return next v_step;
  end loop;
end;
$$;
