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
