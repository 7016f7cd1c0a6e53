-- Frozen migration delta 0034_queue_provisioning (loaded by
-- pgflow_django/migrations/0034_queue_provisioning.py):
-- * pgflow.write_queue_access() checks every queue's tables with one lookup by key instead of a scan
--   of pg_attribute per queue (13 s with 350 queues, now linear);
-- * beyond 32 queues the branches of static SQL move out of pgflow.queue_access into 256 functions
--   pgflow.queue_access_000 to _255 chosen by a hash of the queue name, and pgflow.queue_access
--   dispatches to them: a new session no longer compiles one branch per queue (2.9 s with 2,000
--   queues), a call no longer compares its queue with every other, and a new or dropped queue
--   rewrites only its own function;
-- * a call that provisions a queue checks and writes only that queue's function, so compiling many
--   flows in one go stays linear;
-- * pgflow.queue_access_dynamic holds PGMQ's dynamic statements for a queue without a branch.
-- The last statement writes the functions for the queues that exist.

-- 0197_function_queue_access_dynamic.sql
-- pgflow.queue_access for a queue without a branch of static SQL: the same operations through PGMQ's
-- functions and statements built at each call (planned again every time). A queue has no branch
-- when it was created after the last pgflow.write_queue_access() or when its tables are not laid out
-- as PGMQ 1.11 to 1.13 make them; a branch is an optimisation and never the only way to a queue.
create or replace function pgflow.queue_access_dynamic(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                                       messages jsonb[], headers jsonb[])
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
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
      'update pgmq.%I as q
          set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
         from unnest($1, $2) as o(msg_id, vt_offset)
        where q.msg_id = o.msg_id
          and ($3 = ''set'' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
       returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers',
      pgmq.format_table_name(queue_name, 'q')) using msg_ids, numbers, op;
  elsif op = 'head' then
    return query execute format(
      'select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
         from pgmq.%I as q
        where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
        order by pgflow.message_priority(q.headers) desc, q.msg_id
        limit 1',
      pgmq.format_table_name(queue_name, 'q'));
  else
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
end;
$$;

-- 0198_function_write_queue_access.sql
-- Writes pgflow.queue_access, the one way the engine sends, archives, hides and looks at the head of
-- a queue's messages, with a branch of static SQL for each of pgflow's queues (pgflow.engine_queues,
-- and provisioning: a queue being created in this transaction, before the row that names it). PGMQ
-- builds these statements as dynamic SQL, planned again on every call, which costs three to eight
-- times as much as running the planned statement for one message; a static statement is planned
-- once per session. A queue without a branch (one created after the last write, or whose tables are
-- not PGMQ's layout) goes through pgflow.queue_access_dynamic, so a branch is an optimisation and
-- never the only way to a queue.
-- A queue gets a branch when its table and archive have PGMQ's layout: the columns below with these
-- types and a generated message id, as PGMQ 1.11 to 1.13 create them. The tables of every queue are
-- resolved once and their columns looked up by key (a scan of pg_attribute per queue made the check
-- quadratic: 13 s with 350 queues).
-- Where the branches live: up to 32 queues, in pgflow.queue_access itself. Beyond, in 256 functions
-- pgflow.queue_access_000 to _255, each holding the branches of the queues whose
-- hashtext(queue) & 255 is its number, and pgflow.queue_access only picks the queue's function
-- (eight comparisons) and calls it. One function with a branch per queue took 2.9 s to compile in
-- each new session with 2,000 queues (compiling grows faster than the text) and compared a queue
-- with every branch before its own on each call; split, a session compiles the dispatcher and the
-- functions of the queues it uses, a call compares a queue with the few of its function, and a new
-- or dropped queue rewrites only its own function, invalidating no other function's plans. The
-- numbered functions, once made, stay (empty below 33 queues), so a session still running the
-- previous dispatcher never calls a missing one.
-- Called where pgflow creates or drops a queue and by every worker at start-up, so a PGMQ upgrade
-- that changes the tables is seen before the first claim. A call that provisions a queue while the
-- dispatcher is in place checks and writes only that queue's function (compiling many flows in one
-- go stays linear); any other call checks every queue. A function is replaced only when its text
-- changes: no DDL, so no invalidated plans in other sessions, when nothing did (a worker's start-up
-- normally writes nothing). Returns the queues that have a branch, among those it checked.
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
  c_inline constant integer := 32;
  c_buckets constant integer := 256;  -- a power of two: a queue's function is hashtext(queue) & 255
  v_candidates text[];
  v_split boolean;
  v_tree text[];
  v_width integer := 1;
  v_dispatcher text;
  v_only integer;
  v_queues text[];
  v_tables text[];
  v_archives text[];
  v_write record;
begin
  if wait then
    perform pg_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0));
  elsif not pg_try_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0)) then
    return null;
  end if;

  select coalesce(array_agg(q.queue_name), '{}') into v_candidates
    from (select e.queue_name from pgflow.engine_queues() as e(queue_name)
          union
          select lower(provisioning) where provisioning is not null) as q;
  v_split := cardinality(v_candidates) > c_inline;

  if v_split then
    -- the dispatcher: a binary tree of comparisons on the number of the queue's function
    v_tree := array(select format('return query select m.* from pgflow.%I(op, queue_name, msg_ids, numbers, messages, headers) as m;',
                                  format('queue_access_%s', lpad(b::text, 3, '0')))
                      from generate_series(0, c_buckets - 1) as b order by b);
    while cardinality(v_tree) > 1 loop
      v_tree := array(select format(E'if v_bucket < %s then\n  %s\nelse\n  %s\nend if;', (2 * i + 1) * v_width,
                                    replace(v_tree[2 * i + 1], E'\n', E'\n  '),
                                    replace(v_tree[2 * i + 2], E'\n', E'\n  '))
                        from generate_series(0, cardinality(v_tree) / 2 - 1) as i order by i);
      v_width := v_width * 2;
    end loop;
    v_dispatcher := format($body$
-- written by pgflow.write_queue_access(): more than %1$s queues, so each queue's branch is in the
-- function pgflow.queue_access_NNN numbered hashtext(queue) & %2$s
declare
  v_bucket constant integer := hashtext(lower(queue_name)) & %2$s;
begin
  %3$s
end;
$body$, c_inline, c_buckets - 1, replace(v_tree[1], E'\n', E'\n  '));
    if provisioning is not null
       and v_dispatcher = (select p.prosrc from pg_proc as p
                            where p.oid = to_regprocedure('pgflow.queue_access(text,text,bigint[],integer[],jsonb[],jsonb[])')) then
      v_only := hashtext(lower(provisioning)) & (c_buckets - 1);
    end if;
  end if;

  -- the tables of every queue checked resolved once, then their columns looked up by key
  with queues as materialized (
    select n.queue_name, n.queue_table, n.archive_table,
           to_regclass(format('pgmq.%I', n.queue_table)) as queue_oid,
           to_regclass(format('pgmq.%I', n.archive_table)) as archive_oid
      from (select q.queue_name, pgmq.format_table_name(q.queue_name, 'q') as queue_table,
                   pgmq.format_table_name(q.queue_name, 'a') as archive_table
              from unnest(v_candidates) as q(queue_name)
             where v_only is null or hashtext(q.queue_name) & (c_buckets - 1) = v_only) as n
  )
  select coalesce(array_agg(qs.queue_name order by qs.queue_name), '{}'),
         coalesce(array_agg(qs.queue_table order by qs.queue_name), '{}'),
         coalesce(array_agg(qs.archive_table order by qs.queue_name), '{}')
    into v_queues, v_tables, v_archives
    from queues as qs
   where (select count(*)
            from (values (qs.queue_oid), (qs.archive_oid)) as t(relid)
            cross join (values ('msg_id', 'bigint'::regtype), ('read_ct', 'integer'),
                               ('enqueued_at', 'timestamptz'), ('last_read_at', 'timestamptz'),
                               ('vt', 'timestamptz'), ('message', 'jsonb'), ('headers', 'jsonb'))
                         as want(column_name, column_type)
            join pg_attribute as a
              on a.attrelid = t.relid and a.attname = want.column_name and a.atttypid = want.column_type
             and not a.attisdropped) = 14
     and exists (select 1 from pg_attribute as a
                  where a.attrelid = qs.queue_oid and a.attname = 'msg_id' and (a.attidentity <> '' or a.atthasdef));

  for v_write in
    with functions as (
      select 'queue_access' as name where v_only is null
      union all
      select format('queue_access_%s', lpad(b::text, 3, '0'))
        from generate_series(0, c_buckets - 1) as b
       where (v_only is null or b = v_only)
         and (v_split or to_regprocedure(format('pgflow.queue_access_%s(text,text,bigint[],integer[],jsonb[],jsonb[])',
                                                lpad(b::text, 3, '0'))) is not null)
    ),
    branches as (
      select case when v_split then format('queue_access_%s', lpad((hashtext(q.queue_name) & (c_buckets - 1))::text, 3, '0'))
                  else 'queue_access' end as name,
             q.queue_name,
             format($branch$
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
  end if;$branch$, q.queue_name, q.queue_table, q.archive_table) as branch
        from unnest(v_queues, v_tables, v_archives) as q(queue_name, queue_table, archive_table)
    ),
    holders as materialized (
      select b.name, string_agg(b.queue_name, ', ' order by b.queue_name) as queues,
             string_agg(b.branch, '' order by b.queue_name) as branches
        from branches as b
       group by b.name
    ),
    wanted as (
      select f.name,
             case when f.name = 'queue_access' and v_split then v_dispatcher
             else format($body$
-- written by pgflow.write_queue_access(): %1$s
declare
  v_queue constant text := lower(queue_name);
begin
  if op is null or op not in ('send', 'archive', 'set', 'extend', 'head') then
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %%',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
%2$s
  return query select m.* from pgflow.queue_access_dynamic(op, queue_name, msg_ids, numbers, messages, headers) as m;
end;
$body$, coalesce('a branch for each of queue ' || h.queues, 'no branch'), coalesce(h.branches, ''))
             end as source
        from functions as f
        left join holders as h on h.name = f.name
    )
    select w.name, w.source
      from wanted as w
     where w.source is distinct from (select p.prosrc from pg_proc as p
                                       where p.oid = to_regprocedure(
                                         format('pgflow.%I(text,text,bigint[],integer[],jsonb[],jsonb[])', w.name)))
     order by w.name desc  -- the numbered functions first, then the dispatcher that calls them
  loop
    execute format($create$
      create or replace function pgflow.%I(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                           messages jsonb[], headers jsonb[])
      returns setof pgmq.message_record
      language plpgsql set search_path = pg_catalog, pgflow, pgmq
      as %L
    $create$, v_write.name, v_write.source);
    if v_write.name = 'queue_access' then
      comment on function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]) is
        'One queue operation (op): send messages with headers, visible after numbers[1] seconds (ids in message order); archive msg_ids; set (or extend) the visibility of msg_ids to numbers[i] seconds from now; head: the visible message a claim takes first, among those sent before this statement. Written by pgflow.write_queue_access().';
    end if;
  end loop;
  return v_queues;
end;
$$;

-- 0199_function_queue_access.sql
-- pgflow.queue_access(op, queue_name, msg_ids, numbers, messages, headers): the engine's one way to
-- send, archive, hide and look at the head of a queue's messages. Its body is written by
-- pgflow.write_queue_access() from the queues pgflow has (the branches themselves, or beyond 32
-- queues a dispatcher to the numbered functions that hold them), so this file creates it and has it
-- written at once; the body below is only what the writer replaces.
create or replace function pgflow.queue_access(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                               messages jsonb[], headers jsonb[])
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  raise exception 'pgflow.queue_access has not been written: run select pgflow.write_queue_access()';
end;
$$;

select pgflow.write_queue_access();
