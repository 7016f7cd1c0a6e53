-- Frozen migration delta 0043_durable_waits (loaded by pgflow_django/migrations/0043_durable_waits.py):
-- steps that wait without a worker, and child flows.
-- * pgflow.steps.step_kind: 'handler' (as before), 'event' (waits for pgflow.send_event, keyed by a
--   JSON path into the run's input, with a timeout), 'sleep' (completes at a time) or 'subflow'
--   (pgflow.steps.subflow_slug: each task starts one run of another flow and completes with its
--   output); runs.parent_run_id, parent_step_slug and parent_task_index name a child's task.
-- * pgflow.step_waits (what waits now) and pgflow.events (sent events, kept for waits that start
--   later and for event_id deduplication).
-- * New: pgflow.send_event (marks the waits an event reaches), pgflow.wake_waits (the workers' wait
--   pass: completes reached, due and ended waits, times out the others), pgflow.start_waits and
--   pgflow.start_child_runs (called when such a step starts), pgflow.end_waits and
--   pgflow.fail_child_run (a failed run or a skipped step ends its waits and fails its children),
--   pgflow.delete_expired_events, pgflow.timestamp_or_null and pgflow.event_lock_key.
-- * Changed: pgflow.start_ready_steps creates an event, sleep or subflow task started and without a
--   message; pgflow.retry_run waits again; stalled recovery leaves waiting tasks alone; a completed
--   or failed child makes its parent's wait due (maybe_complete_runs, fail_run); fail_run and
--   skip_step end waits; the fast completion path leaves child runs and dependent waiting steps to
--   the general path; prune and delete_flow_and_data handle waits; the flow's shape carries what a
--   step waits for.

-- 0110_table_steps.sql (the columns it adds)
alter table pgflow.steps
  add column step_kind text not null default 'handler' constraint steps_step_kind_check
    check (step_kind in ('handler', 'event', 'sleep', 'subflow')),
  add column wait_event text constraint steps_wait_event_check check (wait_event <> ''),
  add column wait_key text constraint steps_wait_key_check check (wait_key ~ '^\$(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+$'),
  add column wait_seconds integer constraint steps_wait_seconds_check check (wait_seconds >= 0),
  add column sleep_until text constraint steps_sleep_until_check
    check (sleep_until ~ '^\$(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+$'),
  add column subflow_slug text constraint steps_subflow_slug_check check (subflow_slug is null or pgflow.is_valid_slug(subflow_slug)),
  add constraint steps_wait_check check (case step_kind
    when 'handler' then wait_event is null and wait_key is null and wait_seconds is null and sleep_until is null
                        and subflow_slug is null
    when 'event' then wait_event is not null and sleep_until is null and subflow_slug is null and step_type = 'single'
    when 'sleep' then wait_event is null and wait_key is null and (wait_seconds is null) <> (sleep_until is null)
                      and subflow_slug is null and step_type = 'single'
    else subflow_slug is not null and wait_event is null and wait_key is null and wait_seconds is null
         and sleep_until is null end);

-- 0140_table_runs.sql (the columns and the index it adds)
alter table pgflow.runs
  add column parent_run_id uuid,
  add column parent_step_slug text,
  add column parent_task_index integer;
create index runs_parent_run_id_idx on pgflow.runs (parent_run_id) where parent_run_id is not null;

-- 0021_function_timestamp_or_null.sql
-- The timestamp a JSON value names, or NULL when it names none: a sleep's time comes from a run's
-- data, and one bad value must fail that step alone, not the statement that starts a batch of steps.
-- (PostgreSQL 15 has no pg_input_is_valid.)
create or replace function pgflow.timestamp_or_null(value jsonb)
returns timestamptz
language plpgsql stable set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jsonb_typeof(value) <> 'string' then
    return null;
  end if;
  return (value #>> '{}')::timestamptz;
exception when others then
  return null;
end;
$$;

-- 0022_function_event_lock_key.sql
-- The advisory lock that orders the starts of waits and the sends of events meeting on one event:
-- the event's name with its key (a keyed event) or with 'run:' and the run id (an event sent to one
-- run). pgflow.start_waits takes it shared after writing its waits and before reading the kept
-- events, pgflow.send_event exclusively before keeping its event and reading the waits, so of a wait
-- and an event written at the same time the later one always sees the earlier. The name and key are
-- hashed into one of 256 locks, so that a start of thousands of waits takes at most 256 of them (the
-- shared lock table holds max_locks_per_transaction per connection); two events that share a lock
-- only wait for each other's send.
create or replace function pgflow.event_lock_key(event_name text, event_key text)
returns bigint
language sql immutable parallel safe
as $$
  select pg_catalog.hashtextextended(
    'pgflow:event:' || (pg_catalog.hashtext(event_name || pg_catalog.chr(31) || event_key) operator(pg_catalog.&) 255)::text,
    0)
$$;

-- 0188_table_step_waits.sql
-- The tasks of event, sleep and subflow steps that wait now: one row from the moment the task starts until it
-- ends (its event, its time, its timeout, or its run failing), so the table holds only what waits
-- and its size never grows with the history. A waiting task holds no queue message and no worker.
-- event_seq: the event pinned to this wait by a start that found one kept, or by a send that could
-- not lock the run; the wait is then due at once and pgflow.wake_waits delivers it.
create table pgflow.step_waits (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null default 0 check (task_index >= 0),
  flow_slug text not null,
  -- the task's attempt this wait belongs to: the completion is fenced by it
  attempt integer not null check (attempt >= 1),
  kind text not null check (kind in ('event', 'sleep', 'subflow')),
  event_name text,
  -- the text of the JSON value at the step's wait_key in the run's input (NULL: not keyed)
  event_key text,
  -- a sleep's time; an event wait's timeout (NULL: none)
  due_at timestamptz,
  since timestamptz not null default clock_timestamp(),
  event_seq bigint,
  -- why the wait cannot go on (a sleep time that is not a timestamp, a child flow not compiled): it
  -- fails when due. On a subflow wait with a child run: the reason its child must fail (its run failed
  -- or its step was skipped while another writer held the child; pgflow.end_waits)
  error_message text,
  -- a subflow task's child run: its end makes the wait due
  child_run_id uuid,
  primary key (run_id, step_slug, task_index),
  check ((kind = 'event') = (event_name is not null)),
  check (kind = 'event' or event_seq is null),
  check (kind = 'subflow' or child_run_id is null)
);

-- the due waits, read by pgflow.wake_waits in time order
create index step_waits_due_at_idx on pgflow.step_waits (due_at) where due_at is not null;
-- the waits a keyed event ends (a run's own are found by the primary key)
create index step_waits_event_key_idx on pgflow.step_waits (event_name, event_key) where event_key is not null;
-- the wait a child run's end makes due
create index step_waits_child_run_id_idx on pgflow.step_waits (child_run_id) where child_run_id is not null;
-- the events pinned to a wait, which pgflow.wake_waits keeps past their expiry until delivered
create index step_waits_event_seq_idx on pgflow.step_waits (event_seq) where event_seq is not null;

-- 0189_table_events.sql
-- The events pgflow.send_event delivered, kept until expires_at for the waits that start later (an
-- event reaches every wait for it that starts before it expires, each wait the earliest one), and
-- for event_id, which makes a repeated send a no-op while the first is kept. An event is sent to one
-- run (run_id) or to every run whose wait key has its value (event_key). No foreign key: a run may
-- be pruned before its events expire.
create table pgflow.events (
  event_seq bigint generated always as identity primary key,
  event_name text not null check (event_name <> ''),
  run_id uuid,
  event_key text,
  payload jsonb not null default 'null'::jsonb,
  event_id text check (event_id <> ''),
  sent_at timestamptz not null default clock_timestamp(),
  expires_at timestamptz not null,
  check ((run_id is null) <> (event_key is null))
);

create unique index events_event_id_key on pgflow.events (event_name, event_id) where event_id is not null;
create index events_run_idx on pgflow.events (event_name, run_id, event_seq) where run_id is not null;
create index events_key_idx on pgflow.events (event_name, event_key, event_seq) where event_key is not null;
create index events_expires_at_idx on pgflow.events (expires_at);

-- 0262_function_start_waits.sql
-- Starts the waits of the given runs' event, sleep and subflow tasks that are started and have none yet
-- (pgflow.start_ready_steps created them, or pgflow.retry_run started them again): one
-- pgflow.step_waits row each, with its key, its timeout or its time. The caller holds the runs' row
-- locks. An event wait then takes the locks of its run's and its key's events (pgflow.event_lock_key,
-- shared, in lock order) and the earliest kept event that reaches it: the event is pinned to it and it
-- is due at once, so the next pgflow.wake_waits completes it (a start never completes a step inside
-- the completion that started it). A sleep whose time is not a timestamp is due at once with
-- the reason and fails there. A subflow task's wait is its child run (pgflow.start_child_runs).
-- Returns the number of waits started.
create or replace function pgflow.start_waits(run_ids uuid[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_started integer;
  v_events jsonb;
begin
  with pending as (
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.attempts_count, s.step_kind, s.wait_event,
           s.wait_key, s.wait_seconds, s.sleep_until, s.deps_count, r.input
      from pgflow.step_tasks as t
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     cross join lateral (select r.input, r.status from pgflow.runs as r where r.run_id = t.run_id offset 0) as r
     where t.run_id = any(run_ids) and t.status = 'started' and s.step_kind in ('event', 'sleep')
       and r.status = 'started'
       -- a probe by key (offset 0 keeps it one): as an anti-join planned on an empty table, it read
       -- every wait for each task
       and not exists (select 1 from pgflow.step_waits as w
                        where w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
                        offset 0)
  ), timed as (
    select p.*,
           case when p.sleep_until is not null then
             pgflow.timestamp_or_null(jsonb_path_query_first(
               case when p.deps_count = 0 then p.input
                    else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                     from pgflow.deps as d
                                     join pgflow.step_states as dst
                                       on dst.run_id = p.run_id and dst.step_slug = d.dep_slug
                                    where d.flow_slug = p.flow_slug and d.step_slug = p.step_slug
                                      and dst.status = 'completed'), '{}'::jsonb) end,
               p.sleep_until::jsonpath)) end as until_at
      from pending as p
  ), inserted as (
    insert into pgflow.step_waits (run_id, step_slug, task_index, flow_slug, attempt, kind, event_name, event_key,
                                   due_at, error_message)
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.attempts_count, t.step_kind, t.wait_event,
           case when t.wait_key is not null then jsonb_path_query_first(t.input, t.wait_key::jsonpath) #>> '{}' end,
           case when t.step_kind = 'event' then clock_timestamp() + make_interval(secs => t.wait_seconds)
                when t.wait_seconds is not null then clock_timestamp() + make_interval(secs => t.wait_seconds)
                else coalesce(t.until_at, clock_timestamp()) end,
           case when t.step_kind = 'sleep' and t.sleep_until is not null and t.until_at is null
                then format('sleep time %s is not an ISO-8601 timestamp in the step''s input', t.sleep_until) end
      from timed as t
    returning step_waits.run_id, step_waits.step_slug, step_waits.task_index, step_waits.kind,
              step_waits.event_name, step_waits.event_key
  )
  select count(*), jsonb_agg(jsonb_build_object('run_id', i.run_id, 'step_slug', i.step_slug,
                                                'task_index', i.task_index, 'event_name', i.event_name,
                                                'event_key', i.event_key)) filter (where i.kind = 'event')
    into v_started, v_events
    from inserted as i;
  v_started := v_started + pgflow.start_child_runs(run_ids);
  if v_events is null then
    return v_started;
  end if;

  -- the new event waits only, from what the insert returned: a read of step_waits by run could be
  -- planned on a partial index and walk every wait. Shared: starts never wait for each other, only
  -- for a send of one of their events (which waits for nothing once it holds its lock)
  perform pg_advisory_xact_lock_shared(k.lock_key)
     from (select distinct pgflow.event_lock_key(n.event_name, c.channel) as lock_key
             from jsonb_to_recordset(v_events) as n(run_id uuid, event_name text, event_key text)
            cross join lateral (values ('run:' || n.run_id::text), (n.event_key)) as c(channel)
            where c.channel is not null
            order by 1) as k;

  update pgflow.step_waits as w
     set event_seq = e.event_seq, due_at = clock_timestamp()
    from (
      select n.run_id, n.step_slug, n.task_index,
             least((select min(e.event_seq) from pgflow.events as e
                     where e.event_name = n.event_name and e.run_id = n.run_id
                       and e.expires_at > clock_timestamp()),
                   (select min(e.event_seq) from pgflow.events as e
                     where n.event_key is not null and e.event_name = n.event_name
                       and e.event_key = n.event_key and e.expires_at > clock_timestamp())) as event_seq
        from jsonb_to_recordset(v_events) as n(run_id uuid, step_slug text, task_index integer, event_name text,
                                               event_key text)
    ) as e
   where e.event_seq is not null
     and w.run_id = e.run_id and w.step_slug = e.step_slug and w.task_index = e.task_index;
  return v_started;
end;
$$;

-- 0263_function_start_child_runs.sql
-- Starts the child runs of the given runs' subflow tasks that are started and have no wait yet: one
-- run of the step's flow (subflow_slug) per task, with the step's input (a map's: the task's
-- element), through pgflow.start_flows, one call per child flow. Each task gets a pgflow.step_waits
-- row naming its child run, written before the child starts so that a child that ends inside its
-- own start makes the wait due at once; the child's parent_run_id, parent_step_slug and
-- parent_task_index name the task. A child flow that is not compiled, or an input its root map
-- cannot take, gives the task a wait that is due at once with the reason and fails there, alone.
-- Starting a child is part of the transaction that starts the step: a start that does not commit
-- leaves no child, and a step never has two children for one attempt. Returns the number of waits.
create or replace function pgflow.start_child_runs(run_ids uuid[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_pending jsonb;
  v_child record;
  v_count integer;
  v_finished uuid[];
begin
  with pending as (
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.attempts_count, s.subflow_slug, s.step_type,
           case when s.deps_count = 0 then r.input
                else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                 from pgflow.deps as d
                                 join pgflow.step_states as dst
                                   on dst.run_id = t.run_id and dst.step_slug = d.dep_slug
                                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                                  and dst.status = 'completed'), '{}'::jsonb) end as step_input
      from pgflow.step_tasks as t
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     cross join lateral (select r.input, r.status from pgflow.runs as r where r.run_id = t.run_id offset 0) as r
     where t.run_id = any(run_ids) and t.status = 'started' and s.step_kind = 'subflow' and r.status = 'started'
       -- a probe by key (offset 0 keeps it one): as an anti-join planned on an empty table, it read
       -- every wait for each task
       and not exists (select 1 from pgflow.step_waits as w
                        where w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
                        offset 0)
  ), inputs as (
    select p.*,
           case when p.step_type = 'map' and p.step_input is not null
                then case when jsonb_typeof(p.step_input) = 'array' then p.step_input -> p.task_index
                          else (select e.value from jsonb_each(p.step_input) as e limit 1) -> p.task_index end
                else p.step_input end as child_input
      from pending as p
  ), checked as (
    select i.*, pgflow.uuid_v7() as child_run_id,
           case when not exists (select 1 from pgflow.flows as f where f.flow_slug = i.subflow_slug)
                  then format('child flow %s is not compiled: compile it (manage.py pgflow_compile %s)',
                              i.subflow_slug, i.subflow_slug)
                when jsonb_typeof(coalesce(i.child_input, 'null'::jsonb)) <> 'array'
                     and exists (select 1 from pgflow.steps as cs
                                  where cs.flow_slug = i.subflow_slug and cs.step_type = 'map' and cs.deps_count = 0)
                  then format('child flow %s starts with a map, which needs an array input, got %s',
                              i.subflow_slug, jsonb_typeof(coalesce(i.child_input, 'null'::jsonb)))
           end as problem
      from inputs as i
  ), waits as (
    insert into pgflow.step_waits (run_id, step_slug, task_index, flow_slug, attempt, kind, child_run_id, due_at,
                                   error_message)
    select c.run_id, c.step_slug, c.task_index, c.flow_slug, c.attempts_count, 'subflow',
           case when c.problem is null then c.child_run_id end,
           case when c.problem is not null then clock_timestamp() end, c.problem
      from checked as c
    returning 1
  )
  select (select count(*) from waits),
         jsonb_agg(jsonb_build_object('flow', c.subflow_slug, 'run_id', c.child_run_id,
                                      'input', coalesce(c.child_input, 'null'::jsonb), 'parent', c.run_id,
                                      'step', c.step_slug, 'task', c.task_index)
                   order by c.run_id, c.step_slug, c.task_index) filter (where c.problem is null)
    into v_count, v_pending
    from checked as c;

  if v_pending is null then
    return coalesce(v_count, 0);
  end if;

  for v_child in
    select p->>'flow' as flow_slug, jsonb_agg(p->'input' order by n) as inputs,
           array_agg((p->>'run_id')::uuid order by n) as ids
      from jsonb_array_elements(v_pending) with ordinality as x(p, n)
     group by p->>'flow'
     order by 1
  loop
    perform 1 from pgflow.start_flows(v_child.flow_slug, v_child.inputs, v_child.ids);
  end loop;

  update pgflow.runs as r
     set parent_run_id = (p->>'parent')::uuid, parent_step_slug = p->>'step', parent_task_index = (p->>'task')::integer
    from jsonb_array_elements(v_pending) as x(p)
   where r.run_id = (p->>'run_id')::uuid;

  -- a child that ended inside its own start (every step skipped, an empty map) ends its wait now
  select array_agg(r.run_id) into v_finished
    from jsonb_array_elements(v_pending) as x(p)
    join pgflow.runs as r on r.run_id = (p->>'run_id')::uuid
   where r.status <> 'started';
  if v_finished is not null then
    update pgflow.step_waits as w set due_at = clock_timestamp()
     where w.child_run_id = any(v_finished) and w.due_at is null;
  end if;
  return v_count;
end;
$$;

-- 0460_function_wake_waits.sql
-- Ends the waits that are due, at most max_waits of them, oldest due first: a sleep past its time
-- completes with {"slept_until": its time}; a wait with a pinned event completes with the event's
-- payload; an event wait past its timeout fails as a task out of attempts ('timed out waiting for
-- event ...'), so its step's when_exhausted (the DSL's when_timeout) decides what follows; a sleep
-- whose time could not be read fails the same way with the reason; a subflow task whose child run
-- ended completes with the child's output, or fails when the child failed. Runs another writer holds are
-- left for the next call; a subflow task's child that its run's failure or its step's skip could
-- not fail then (another writer held it) fails here when free. Also deletes up to max_waits expired
-- events (pgflow.delete_expired_events), after delivering those pinned to waits. Every worker calls it on a
-- timer (the same pass as the scheduler's); pg_cron or any session may call it too. Returns the
-- number of waits completed and failed.
create or replace function pgflow.wake_waits(max_waits integer default 1000)
returns table (outcome text, wait_count integer)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_candidates uuid[];
  v_locked uuid[];
  v_items jsonb;
  v_failures jsonb;
  v_failure record;
  v_orphan record;
  v_ended jsonb;
  v_completed integer := 0;
  v_failed integer := 0;
  -- a variable, not clock_timestamp() in the conditions: a volatile call is no index condition, and the
  -- reads below would walk every wait and event in time order
  v_now timestamptz := clock_timestamp();
begin
  select array_agg(distinct d.run_id) into v_candidates
    from (select w.run_id from pgflow.step_waits as w
           where w.due_at <= v_now order by w.due_at limit max_waits) as d;
  if v_candidates is null then
    perform pgflow.delete_expired_events(v_now, max_waits);
    return query select 'completed'::text, 0 union all select 'failed', 0;
    return;
  end if;

  -- one lock order for every writer of a run: the run row first
  select array_agg(l.run_id) into v_locked
    from (select r.run_id from pgflow.runs as r
           where r.run_id = any(v_candidates) order by r.run_id offset 0
             for update skip locked) as l;
  v_locked := coalesce(v_locked, '{}');

  -- a wait whose run is gone (deleted by hand) would be due for ever, ahead of every other
  delete from pgflow.step_waits as w
   where w.run_id = any(v_candidates) and not (w.run_id = any(v_locked))
     and not exists (select 1 from pgflow.runs as r where r.run_id = w.run_id offset 0);

  -- children whose parent failed, or whose step was skipped, while another writer held them
  for v_orphan in
    select w.run_id, w.step_slug, w.task_index, w.child_run_id, w.error_message
      from pgflow.step_waits as w
     where w.run_id = any(v_locked) and w.due_at <= v_now and w.kind = 'subflow'
       and w.child_run_id is not null and w.error_message is not null
  loop
    if pgflow.fail_child_run(v_orphan.child_run_id, v_orphan.error_message) then
      delete from pgflow.step_waits as w
       where w.run_id = v_orphan.run_id and w.step_slug = v_orphan.step_slug and w.task_index = v_orphan.task_index;
    end if;
  end loop;

  with ended as (
    delete from pgflow.step_waits as w
     where w.run_id = any(v_locked) and w.due_at <= v_now
       and not (w.kind = 'subflow' and w.child_run_id is not null and w.error_message is not null)
    returning w.*
  )
  select jsonb_agg(to_jsonb(en)) into v_ended from ended as en;
  if v_ended is null then
    perform pgflow.delete_expired_events(v_now, max_waits);
    return query select 'completed'::text, 0 union all select 'failed', 0;
    return;
  end if;

  -- a statement of its own: a delete that waited for a send's delivery to commit sees the wait as
  -- the send left it, but not the event the send kept, which only a later snapshot holds
  with ended as (
    select * from jsonb_populate_recordset(null::pgflow.step_waits, v_ended)
  ), resolved as (
    select en.*, coalesce(ev.payload, ch.output) as payload,
           case when en.error_message is not null then en.error_message
                when en.kind = 'event' and ev.event_seq is null
                  then format('timed out waiting for event %s', en.event_name)
                when en.kind = 'subflow' and ch.status is distinct from 'completed'
                  then format('child run %s failed: %s', en.child_run_id,
                              coalesce(ch.error_message, 'it no longer exists')) end as failure
      from ended as en
      left join pgflow.events as ev on ev.event_seq = en.event_seq
      left join lateral (select c.status, c.output, c.error_message from pgflow.runs as c
                          where c.run_id = en.child_run_id offset 0) as ch on true
  )
  select jsonb_agg(jsonb_build_object('run_id', r.run_id, 'step_slug', r.step_slug, 'task_index', r.task_index,
                                      'attempt', r.attempt,
                                      'output', case when r.kind = 'sleep'
                                                     then jsonb_build_object('slept_until', r.due_at)
                                                     else coalesce(r.payload, 'null'::jsonb) end)
                   order by r.run_id, r.step_slug, r.task_index) filter (where r.failure is null),
         jsonb_agg(jsonb_build_object('run_id', r.run_id, 'step_slug', r.step_slug, 'task_index', r.task_index,
                                      'attempt', r.attempt, 'error', r.failure)
                   order by r.run_id, r.step_slug, r.task_index) filter (where r.failure is not null)
    into v_items, v_failures
    from resolved as r;

  if v_items is not null then
    select count(*) filter (where c.outcome = 'completed') into v_completed from pgflow.complete_tasks(v_items) as c;
  end if;

  for v_failure in
    select f.run_id, f.step_slug, f.task_index, f.attempt, f.error
      from jsonb_to_recordset(v_failures) as f(run_id uuid, step_slug text, task_index integer, attempt integer, error text)
  loop
    -- a completion above may have failed the run meanwhile (a condition with when_unmet = fail)
    if exists (select 1 from pgflow.step_tasks as t
                 join pgflow.runs as r on r.run_id = t.run_id
                where t.run_id = v_failure.run_id and t.step_slug = v_failure.step_slug
                  and t.task_index = v_failure.task_index and t.status = 'started'
                  and t.attempts_count = v_failure.attempt and r.status = 'started') then
      update pgflow.step_tasks as t
         set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
               'attempt', t.attempts_count, 'worker_id', null, 'error', v_failure.error, 'failed_at', clock_timestamp()))
       where t.run_id = v_failure.run_id and t.step_slug = v_failure.step_slug and t.task_index = v_failure.task_index;
      perform pgflow.exhaust_task(v_failure.run_id, v_failure.step_slug, v_failure.task_index, v_failure.error);
      v_failed := v_failed + 1;
    end if;
  end loop;

  perform pgflow.delete_expired_events(v_now, max_waits);
  return query select 'completed'::text, v_completed union all select 'failed', v_failed;
end;
$$;

-- 0461_function_fail_child_run.sql
-- Fails a started child run (pgflow.fail_run with error_message) if no other transaction holds it,
-- without waiting: its parent's writer holds the parent and may hold other runs, and waiting for a
-- child locked after them would break the order every writer locks runs in. True when the child no
-- longer needs failing (failed now, finished, or gone); false when another writer holds it (the
-- caller leaves its wait due, and the next pgflow.wake_waits tries again).
create or replace function pgflow.fail_child_run(child_run_id uuid, error_message text)
returns boolean
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  perform 1 from pgflow.runs as r where r.run_id = fail_child_run.child_run_id for update skip locked;
  if found then
    perform pgflow.fail_run(fail_child_run.child_run_id, fail_child_run.error_message);
    return true;
  end if;
  return not exists (select 1 from pgflow.runs as r
                      where r.run_id = fail_child_run.child_run_id and r.status = 'started');
end;
$$;

-- 0462_function_end_waits.sql
-- Ends the waits of a run's tasks that no longer wait, because the run failed (step_slugs NULL) or
-- those steps were skipped: event and sleep waits are deleted; a subflow task's unfinished child run
-- fails with reason (pgflow.fail_child_run), and its wait is deleted, or, when another writer holds
-- the child, kept due at once with the reason, for pgflow.wake_waits to fail the child later. The
-- caller holds the run's lock.
create or replace function pgflow.end_waits(run_id uuid, reason text, step_slugs text[] default null)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_child record;
begin
  delete from pgflow.step_waits as w
   where w.run_id = end_waits.run_id and w.kind <> 'subflow'
     and (end_waits.step_slugs is null or w.step_slug = any(end_waits.step_slugs));
  for v_child in
    select w.step_slug, w.task_index, w.child_run_id
      from pgflow.step_waits as w
     where w.run_id = end_waits.run_id and w.kind = 'subflow'
       and (end_waits.step_slugs is null or w.step_slug = any(end_waits.step_slugs))
     order by w.child_run_id
  loop
    if v_child.child_run_id is null or pgflow.fail_child_run(v_child.child_run_id, end_waits.reason) then
      delete from pgflow.step_waits as w
       where w.run_id = end_waits.run_id and w.step_slug = v_child.step_slug and w.task_index = v_child.task_index;
    else
      update pgflow.step_waits as w
         set due_at = clock_timestamp(), error_message = end_waits.reason
       where w.run_id = end_waits.run_id and w.step_slug = v_child.step_slug and w.task_index = v_child.task_index;
    end if;
  end loop;
end;
$$;

-- 0463_function_delete_expired_events.sql
-- Deletes up to max_events events kept past their expiry (pgflow.events.expires_at at or before
-- expired_at), oldest first, but not one pinned to a wait that has not taken it yet: the wait pass
-- delivers it first, however late. Called by pgflow.wake_waits; skips rows another pass is deleting.
create or replace function pgflow.delete_expired_events(expired_at timestamptz, max_events integer)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_deleted integer;
begin
  delete from pgflow.events as e
   where e.event_seq in (
           select x.event_seq from pgflow.events as x
            where x.expires_at <= delete_expired_events.expired_at
              and not exists (select 1 from pgflow.step_waits as w where w.event_seq = x.event_seq offset 0)
            order by x.expires_at
            limit delete_expired_events.max_events
              for update skip locked);
  get diagnostics v_deleted = row_count;
  return v_deleted;
end;
$$;

-- 0465_function_send_event.sql
-- Sends the event event_name with payload to one run (run_id) or to every run whose wait key has the
-- value key (its text: 42 and '42' are the same key). Every event wait for it that waits now takes it
-- (the event is pinned to the wait, which is due at once), and the next pgflow.wake_waits completes
-- the wait's step with the payload; workers run that pass as soon as this transaction commits
-- (NOTIFY pgflow_waits). The event is also kept for retention_seconds, and every wait for it that
-- starts meanwhile takes it (pgflow.start_waits). A wait takes at most one event. With event_id, a
-- second send of the same event name and id while the first is kept changes nothing and returns 0.
-- Runs in the caller's transaction: nothing is delivered unless it commits. Returns the number of
-- waits the event was delivered to.
-- Locks: the event's lock (pgflow.event_lock_key, exclusive), then no lock is waited for: a wait row
-- another transaction holds (ending it, or delivering it another event) is left to it. So a send
-- never waits for a run, and a start (which holds runs) never waits for a send that waits for it.
create or replace function pgflow.send_event(
  event_name text, payload jsonb default null, run_id uuid default null, key text default null,
  event_id text default null, retention_seconds integer default 86400
)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_seq bigint;
  v_delivered integer;
begin
  if coalesce(event_name, '') = '' then
    raise exception 'send_event: the event name must be a non-empty text' using errcode = '22023';
  end if;
  if (send_event.run_id is null) = (send_event.key is null) then
    raise exception 'send_event(%): pass run_id (one run) or key (the runs whose wait key has that value), not % ',
      quote_literal(event_name), case when send_event.run_id is null then 'neither' else 'both' end
      using errcode = '22023';
  end if;
  if retention_seconds is null or retention_seconds < 0 then
    raise exception 'send_event(%): retention_seconds must be >= 0, got %', quote_literal(event_name),
      coalesce(retention_seconds::text, 'NULL') using errcode = '22023';
  end if;
  if send_event.event_id is not null and exists (
       select 1 from pgflow.events as e
        where e.event_name = send_event.event_name and e.event_id = send_event.event_id) then
    return 0;
  end if;

  perform pg_advisory_xact_lock(pgflow.event_lock_key(send_event.event_name,
                                                      coalesce('run:' || send_event.run_id::text, send_event.key)));

  insert into pgflow.events (event_name, run_id, event_key, payload, event_id, expires_at)
  values (send_event.event_name, send_event.run_id, send_event.key, coalesce(send_event.payload, 'null'::jsonb),
          send_event.event_id, clock_timestamp() + make_interval(secs => retention_seconds))
  on conflict (event_name, event_id) where event_id is not null do nothing
  returning event_seq into v_seq;
  if v_seq is null then
    return 0;
  end if;

  -- one branch per target, each by its own index: an OR of both could walk every wait
  if send_event.run_id is not null then
    update pgflow.step_waits as w
       set event_seq = v_seq, due_at = clock_timestamp()
     where (w.run_id, w.step_slug, w.task_index) in (
             select x.run_id, x.step_slug, x.task_index from pgflow.step_waits as x
              where x.run_id = send_event.run_id and x.event_name = send_event.event_name
                and x.event_seq is null
                for update skip locked);
  else
    update pgflow.step_waits as w
       set event_seq = v_seq, due_at = clock_timestamp()
     where (w.run_id, w.step_slug, w.task_index) in (
             select x.run_id, x.step_slug, x.task_index from pgflow.step_waits as x
              where x.event_name = send_event.event_name and x.event_key = send_event.key
                and x.event_seq is null
                for update skip locked);
  end if;
  get diagnostics v_delivered = row_count;
  if v_delivered > 0 then
    perform pg_notify('pgflow_waits', '');
  end if;
  return v_delivered;
end;
$$;

-- 0230_function_fail_run.sql
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible;
-- a step that had started reads 'cancelled' (its tasks will never finish). remaining_steps keeps
-- counting the steps that neither completed nor were skipped, as on every other path. Its waits
-- (pgflow.step_waits) end with it, and its unfinished child runs fail (pgflow.end_waits); a failed
-- child run makes its parent's wait due (pgflow.wake_waits fails the parent's task). Its
-- concurrency slots are freed here, or, inside pgflow.complete_tasks, by that completion's release.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_msgs bigint[];
  v_parent uuid;
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = clock_timestamp(), error_message = fail_run.error_message,
         remaining_steps = (select count(*) from pgflow.step_states as ss
                             where ss.run_id = r.run_id and ss.status not in ('completed', 'skipped'))
   where r.run_id = fail_run.run_id and r.status = 'started'
  returning r.parent_run_id into v_parent;
  if not found then
    return;
  end if;

  -- its waits end, and its unfinished child runs fail with it (now, or at the next wait pass)
  perform pgflow.end_waits(fail_run.run_id, format('parent run %s failed', fail_run.run_id));

  update pgflow.step_states as ss
     set status = 'cancelled'
   where ss.run_id = fail_run.run_id and ss.status = 'started';

  with cancelled as (
    update pgflow.step_tasks as t
       set status = 'cancelled', error_message = coalesce(t.error_message, 'run failed: ' || fail_run.error_message)
     where t.run_id = fail_run.run_id and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
  -- a failed child run: its parent's subflow task is due, for pgflow.wake_waits
  if v_parent is not null then
    update pgflow.step_waits as w set due_at = clock_timestamp()
     where w.child_run_id = fail_run.run_id and w.due_at is null;
    perform pg_notify('pgflow_waits', '');
  end if;
  -- inside pgflow.complete_tasks the completion's own release, its last statement, frees them
  if current_setting('pgflow.slots_released_at_end', true) is distinct from 'on' then
    perform pgflow.release_limit_slots(array[fail_run.run_id]);
  end if;
end;
$$;

-- 0240_function_skip_step.sql
-- Skips one step of a started run, and with cascade every step downstream of it. Tasks of skipped
-- steps are terminalized as skipped and their messages archived, and the waits of those that waited
-- end (pgflow.end_waits: a subflow task's child run fails). The caller holds the run's lock
-- and runs pgflow.cascade afterwards so dependents see the skip.
create or replace function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_msgs bigint[];
  v_started text[];
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
       set status = 'skipped', skip_reason = tg.reason, skipped_at = clock_timestamp(), remaining_tasks = null
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
    returning t.queue_name, t.message_id, t.step_slug, t.message_id is null as waited
  )
  select array_agg(t.queue_name), array_agg(t.message_id),
         array_agg(distinct t.step_slug) filter (where t.waited)
    into v_queues, v_msgs, v_started
    from tasks as t;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
  -- the skipped tasks that waited (a map subflow step's other children, when one of them failed)
  if v_started is not null then
    perform pgflow.end_waits(skip_step.run_id,
                             format('step %s of parent run %s was skipped', skip_step.step_slug, skip_step.run_id),
                             v_started);
  end if;
end;
$$;

-- 0250_function_maybe_complete_runs.sql
-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent, and a run with no completed leaf (no steps, or every leaf skipped) has no output
-- (NULL), as in pgflow. Each distinct run id of the batch is probed on its own, then its step
-- states (see cascade). A completed child run makes its parent's wait due and notifies the channel
-- pgflow_waits, on which workers run their wait pass at once.
create or replace function pgflow.maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_children uuid[];
begin
  with counts as (
    select r.run_id,
           count(ss.step_slug) filter (where ss.status not in ('completed', 'skipped')) as open_steps
      from (select distinct u.run_id from unnest(run_ids) as u(run_id)) as b
     cross join lateral (
       select r.run_id, r.status from pgflow.runs as r where r.run_id = b.run_id offset 0
     ) as r
      left join lateral (
        select ss.step_slug, ss.status from pgflow.step_states as ss where ss.run_id = r.run_id offset 0
      ) as ss on true
     where r.status = 'started'
     group by r.run_id
  )
  , finished as (
  update pgflow.runs as r
     set remaining_steps = c.open_steps,
         status = case when c.open_steps = 0 then 'completed' else r.status end,
         completed_at = case when c.open_steps = 0 then clock_timestamp() end,
         output = case when c.open_steps = 0 then (
           select jsonb_object_agg(ss.step_slug, ss.output)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id and ss.status = 'completed'
              and not exists (select 1 from pgflow.deps as d
                               where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
         ) end
    from counts as c
   where r.run_id = c.run_id
     and (r.remaining_steps <> c.open_steps or c.open_steps = 0)
  returning r.run_id, r.status, r.parent_run_id
  )
  select array_agg(f.run_id) into v_children
    from finished as f where f.status = 'completed' and f.parent_run_id is not null;

  -- a completed child run: its parent's subflow task is due, for pgflow.wake_waits (which locks the
  -- parent: a child never waits for its parent's lock)
  if v_children is not null then
    update pgflow.step_waits as w set due_at = clock_timestamp()
     where w.child_run_id = any(v_children) and w.due_at is null;
    perform pg_notify('pgflow_waits', '');
  end if;
end;
$$;

-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one send per
-- queue and start delay (pgflow.queue_access) (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here. An event or sleep
-- step's task (a subflow step's tasks) is created started, with no message, and waits
-- (pgflow.start_waits).
-- A task's priority (the run's, else its step's default, else its flow's) travels in its message's
-- headers, {"priority": N}; a priority of 0 sends no headers (pgflow.message_priority reads 0).
-- The n-th id returned by the send belongs to the n-th message sent. The step states are read by
-- the batch and each run by its own probe (see cascade), both also between the batch's lowest and
-- highest run ids, so that a generic plan on a partitioned history sets up only the partitions
-- that hold them (see pgflow.complete_hop).
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_batches jsonb;
  v_batch record;
  v_lo uuid;
  v_hi uuid;
  v_waits integer;
begin
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(run_ids) as b;
  with started as (
    update pgflow.step_states as ss
       set status = 'started', started_at = clock_timestamp(), remaining_tasks = ss.initial_tasks
      from pgflow.steps as s, pgflow.flows as f
     where ss.run_id = any(run_ids) and ss.run_id between v_lo and v_hi and ss.status = 'created'
       and ss.remaining_deps = 0 and ss.initial_tasks > 0
       and (select r.status from pgflow.runs as r where r.run_id = ss.run_id and r.run_id between v_lo and v_hi) = 'started'
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       and f.flow_slug = ss.flow_slug
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks, s.opt_start_delay,
              s.queue_name, s.opt_priority as step_priority, f.opt_priority as flow_priority, s.step_kind
  ), waiting as (
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, queue_name, status, attempts_count,
                                   started_at)
    select st.flow_slug, st.run_id, st.step_slug, i, st.queue_name, 'started', 1, clock_timestamp()
      from started as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
     where st.step_kind <> 'handler'
    returning 1
  ), timed as (
    select st.flow_slug, st.run_id, st.step_slug, st.initial_tasks, st.queue_name,
           greatest(coalesce(st.opt_start_delay, 0),
                    coalesce(ceil(extract(epoch from r.not_before - clock_timestamp()))::integer, 0)) as start_delay,
           coalesce(r.priority, st.step_priority, st.flow_priority) as priority
      from started as st
     cross join lateral (
       select r.not_before, r.priority from pgflow.runs as r
        where r.run_id = st.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r
     where st.step_kind = 'handler'
  ), messages as (
    select st.queue_name, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message,
           case when st.priority <> 0 then jsonb_build_object('priority', st.priority) end as headers
      from timed as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.queue_name, 'start_delay', m.start_delay, 'messages', m.messages,
                                       'headers', m.headers)),
         (select count(*) from waiting)
    into v_batches, v_waits
    from (select queue_name, start_delay, jsonb_agg(message) as messages,
                 case when bool_or(headers is not null) then jsonb_agg(headers) end as headers
            from messages group by queue_name, start_delay) as m;

  if v_waits > 0 then
    perform pgflow.start_waits(run_ids);
  end if;
  if v_batches is null then
    return;
  end if;

  for v_batch in
    select b->>'queue_name' as queue_name, (b->>'start_delay')::integer as start_delay, b->'messages' as messages,
           nullif(b->'headers', 'null'::jsonb) as headers
      from jsonb_array_elements(v_batches) as b
  loop
    -- rows from pairs the n-th message with the n-th id by position: no join to plan, so a large map
    -- step's batch costs its length, whatever the planner settings
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select m.message->>'flow_slug', (m.message->>'run_id')::uuid, m.message->>'step_slug',
           (m.message->>'task_index')::integer, m.msg_id, v_batch.queue_name
      from rows from (
             jsonb_array_elements(v_batch.messages),
             pgflow.queue_access(
               'send', v_batch.queue_name, null, array[v_batch.start_delay],
               array(select e from jsonb_array_elements(v_batch.messages) as e),
               case when v_batch.headers is not null
                    then array(select nullif(h, 'null'::jsonb) from jsonb_array_elements(v_batch.headers) as h) end)
           ) as m(message, msg_id, read_ct, enqueued_at, last_read_at, vt, body, headers);
  end loop;
end;
$$;

-- 0308_function_complete_hop.sql
-- The fast path of a completion: one call that completes a batch of single-step tasks when each is
-- the common case, in a handful of static statements instead of the general path's (complete_tasks,
-- cascade, start_ready_steps, maybe_complete_runs, hand_off_tasks, claim_classified: about 40
-- statements and 15 nested calls per hop). It applies to a batch only when every item
-- - names a distinct run, task 0 of a single step, and is the current claim (the task started in
--   that attempt, its step and run started), of a run that is no flow's child;
-- - belongs to a flow without flow control (no pgflow.flow_limits rows, no limit_holds or
--   limit_waits of the run);
-- - feeds only single handler steps still created, with no condition and no start delay, in a run not
--   delayed (not_before passed).
-- Otherwise it returns no row and writes nothing (it has locked the batch's runs, in the order
-- every writer locks them), and the caller takes the general path in the same transaction: a stale
-- item, a failure, a map, a condition, a skip, a limit or a delay never goes through here.
-- What it writes is what the general path writes for such a batch: each task completed with its
-- output and its message archived; its step completed with that output; each dependent's open
-- dependencies recounted (completed and skipped ones are closed), and a dependent left with none
-- started with its task and that task's message (the priority in its headers, as
-- start_ready_steps sends it); the run's open steps recounted, and the run completed with its
-- leaves' outputs when none is left. With free_slots, the new tasks of this queue that the
-- worker supports at the generation it compiled against are claimed for it in the same
-- statement as hand_off_tasks would (at most free_slots in task key order, none below the
-- priority of the queue's head): started in attempt 1, their messages sent hidden for the step's
-- timeout + 2 s, so a worker that dies holding one loses it to stalled recovery as any claim.
-- Returns one row per item ('completed', message columns NULL), then one 'claimed' row per task
-- handed off, as pgflow.complete_and_hand_off returns them. pgflow.fast_hop = 'off' (a setting)
-- turns this path off: the equivalence tests drive both paths with it. It states no planner settings
-- of its own: it runs inside complete_tasks and complete_and_hand_off, whose settings
-- (0990_settings_hot_path.sql) it plans under, and switching them again would cost each call.
create or replace function pgflow.complete_hop(
  items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_attempts integer[];
  v_outputs jsonb[];
  v_eligible boolean;
  v_queues text[];
  v_msgs bigint[];
  v_new_runs uuid[];
  v_new_steps text[];
  v_claimed pgflow.claim_record[];
  v_lo uuid;
  v_hi uuid;
begin
  if current_setting('pgflow.fast_hop', true) = 'off' or items is null or jsonb_typeof(items) <> 'array' then
    return;
  end if;

  select array_agg(x.run_id order by x.run_id), array_agg(x.step_slug order by x.run_id),
         array_agg(x.task_index order by x.run_id), array_agg(x.attempt order by x.run_id),
         array_agg(coalesce(x.output, 'null'::jsonb) order by x.run_id)
    into v_runs, v_steps, v_indexes, v_attempts, v_outputs
    from jsonb_to_recordset(items) as x(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb)
  having count(*) = count(distinct x.run_id)
     and bool_and(x.run_id is not null and x.step_slug is not null and x.task_index = 0 and x.attempt is not null);
  if v_runs is null then
    return;
  end if;
  -- the batch's lowest and highest run ids bound the history probes below, redundant with their
  -- keys, so that on a partitioned history a generic plan prunes, when it starts, the partitions
  -- outside them (a key from an array prunes only as each row is read, after every partition's
  -- scan has been set up: a quarter of a hop's time with 15 daily partitions). Only reads whose
  -- run id is a parameter (a lateral probe, a correlated subquery) or an array (= any) take them:
  -- an UPDATE joined to the batch keeps its keys alone, because there the bounds could become the
  -- index condition that drives it and read every run in the range
  v_lo := v_runs[1];
  v_hi := v_runs[cardinality(v_runs)];

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_runs) and r.run_id between v_lo and v_hi order by r.run_id for update;

  -- each item's run, step and task by its own probe (see cascade)
  select bool_and(coalesce(
           r.status = 'started' and (r.not_before is null or r.not_before <= clock_timestamp())
           and r.parent_run_id is null
           and ss.status = 'started' and ss.remaining_tasks = 1
           and t.status = 'started' and t.attempts_count = i.attempt and t.message_id is not null
           and s.step_type = 'single'
           and not exists (select 1 from pgflow.flow_limits as l where l.flow_slug = r.flow_slug)
           and not exists (select 1 from pgflow.limit_holds as h where h.run_id = i.run_id)
           and not exists (select 1 from pgflow.limit_waits as w where w.run_id = i.run_id)
           and not exists (
             select 1
               from pgflow.deps as d
               join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.step_slug
               left join pgflow.step_states as dss
                      on dss.run_id = i.run_id and dss.run_id between v_lo and v_hi and dss.step_slug = d.step_slug
              where d.flow_slug = r.flow_slug and d.dep_slug = i.step_slug
                and not coalesce(ds.step_type = 'single' and ds.step_kind = 'handler' and ds.required_input_pattern is null
                                 and ds.forbidden_input_pattern is null and coalesce(ds.opt_start_delay, 0) = 0
                                 and dss.status = 'created' and dss.initial_tasks = 1, false)),
           false))
    into v_eligible
    from unnest(v_runs, v_steps, v_indexes, v_attempts) as i(run_id, step_slug, task_index, attempt)
    left join lateral (
      select r.flow_slug, r.status, r.not_before, r.parent_run_id from pgflow.runs as r
       where r.run_id = i.run_id and r.run_id between v_lo and v_hi offset 0
    ) as r on true
    left join lateral (
      select ss.status, ss.remaining_tasks from pgflow.step_states as ss
       where ss.run_id = i.run_id and ss.run_id between v_lo and v_hi and ss.step_slug = i.step_slug offset 0
    ) as ss on true
    left join lateral (
      select t.status, t.attempts_count, t.message_id from pgflow.step_tasks as t
       where t.run_id = i.run_id and t.run_id between v_lo and v_hi and t.step_slug = i.step_slug and t.task_index = i.task_index
      offset 0
    ) as t on true
    left join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = i.step_slug;
  if not coalesce(v_eligible, false) then
    return;
  end if;

  -- the tasks, their steps, the dependents and the runs in one statement, each read as it was
  -- before the statement: the completing step still counts as open there, so it is left out of
  -- every count. The task key comes from the batch, never a constant: on empty partitions a
  -- constant task_index made an index scan on it alone look cheapest.
  with items as (
    select i.run_id, i.step_slug, i.task_index, i.output, r.flow_slug
      from unnest(v_runs, v_steps, v_indexes, v_outputs) as i(run_id, step_slug, task_index, output)
     cross join lateral (
       select r.flow_slug from pgflow.runs as r where r.run_id = i.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r
  ), done as (
    update pgflow.step_tasks as t
       set status = 'completed', output = i.output, completed_at = clock_timestamp()
      from items as i
     where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
    returning t.queue_name, t.message_id
  ), completed_steps as (
    update pgflow.step_states as ss
       set remaining_tasks = 0, status = 'completed', completed_at = clock_timestamp(), output = i.output
      from items as i
     where ss.run_id = i.run_id and ss.step_slug = i.step_slug
  ), counts as (
    select i.run_id, d.step_slug,
           (select count(*)
              from pgflow.deps as od
              join pgflow.step_states as ost
                on ost.run_id = i.run_id and ost.run_id between v_lo and v_hi and ost.step_slug = od.dep_slug
             where od.flow_slug = i.flow_slug and od.step_slug = d.step_slug and od.dep_slug <> i.step_slug
               and ost.status not in ('completed', 'skipped')) as open_deps
      from items as i
      join pgflow.deps as d on d.flow_slug = i.flow_slug and d.dep_slug = i.step_slug
  ), dependents as (
    update pgflow.step_states as ss
       set remaining_deps = c.open_deps,
           status = case when c.open_deps = 0 then 'started' else ss.status end,
           started_at = case when c.open_deps = 0 then clock_timestamp() else ss.started_at end,
           remaining_tasks = case when c.open_deps = 0 then ss.initial_tasks else ss.remaining_tasks end
      from counts as c
     where ss.run_id = c.run_id and ss.step_slug = c.step_slug
       and (ss.remaining_deps <> c.open_deps or c.open_deps = 0)
    returning ss.run_id, ss.step_slug, ss.status
  ), run_counts as (
    -- each item with its run's open steps, so that the run's update reads one row per item (joined
    -- to the items again, the batch was matched against itself: 10,000 comparisons for 100 items)
    select i.run_id, i.step_slug, i.output, i.flow_slug,
           (select count(*) from pgflow.step_states as ss
             where ss.run_id = i.run_id and ss.run_id between v_lo and v_hi and ss.step_slug <> i.step_slug
               and ss.status not in ('completed', 'skipped')) as open_steps
      from items as i
  ), finished_runs as (
    update pgflow.runs as r
       set remaining_steps = c.open_steps,
           status = case when c.open_steps = 0 then 'completed' else r.status end,
           completed_at = case when c.open_steps = 0 then clock_timestamp() end,
           output = case when c.open_steps = 0 then (
             select jsonb_object_agg(l.step_slug, l.output)
               from (select ss.step_slug, ss.output
                       from pgflow.step_states as ss
                      where ss.run_id = c.run_id and ss.run_id between v_lo and v_hi and ss.status = 'completed'
                        and ss.step_slug <> c.step_slug
                     union all
                     select c.step_slug, c.output) as l
              where not exists (select 1 from pgflow.deps as d
                                 where d.flow_slug = c.flow_slug and d.dep_slug = l.step_slug)
           ) end
      from run_counts as c
     where r.run_id = c.run_id and (r.remaining_steps <> c.open_steps or c.open_steps = 0)
  )
  select (select array_agg(d.queue_name) from done as d), (select array_agg(d.message_id) from done as d),
         (select array_agg(d.run_id order by d.run_id, d.step_slug) from dependents as d where d.status = 'started'),
         (select array_agg(d.step_slug order by d.run_id, d.step_slug) from dependents as d where d.status = 'started')
    into v_queues, v_msgs, v_new_runs, v_new_steps;
  perform pgflow.archive_task_messages(v_queues, v_msgs);

  if v_new_runs is not null then
    -- each new task with its message, one send per queue and visibility: a task handed to this
    -- worker is sent hidden for its step's timeout + 2 s (what a claim sets); the n-th id a send
    -- returns is its n-th message's
    with tasks as (
      select n.run_id, n.step_slug, n.k, r.flow_slug, s.queue_name,
             coalesce(r.priority, s.opt_priority, f.opt_priority) as priority,
             coalesce(s.opt_timeout, f.opt_timeout) + 2 as claim_seconds,
             exists (select 1
                       from unnest(complete_hop.support_flows, complete_hop.support_steps,
                                   complete_hop.support_generations) as p(flow_slug, step_slug, generation)
                      where p.flow_slug = r.flow_slug and p.step_slug = n.step_slug
                        and p.generation = f.generation) and s.queue_name = lower(complete_hop.queue_name)
             -- read again here: a flow that got its first limits since the check above has its tasks
             -- left to a claim, which takes their slots (as pgflow.limit_claim does in a hand-off)
             and not exists (select 1 from pgflow.flow_limits as l where l.flow_slug = r.flow_slug)
               as supported
        from unnest(v_new_runs, v_new_steps) with ordinality as n(run_id, step_slug, k)
       cross join lateral (
         select r.flow_slug, r.priority from pgflow.runs as r
          where r.run_id = n.run_id and r.run_id between v_lo and v_hi offset 0
       ) as r
        join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = n.step_slug
        join pgflow.flows as f on f.flow_slug = r.flow_slug
    ), ranked as (
      select t.*, row_number() over (partition by t.supported order by t.k) as place
        from tasks as t
    ), decided as (
      -- the queue's head is read only for a task that could be handed off: a CASE branch, and a
      -- subquery correlated to the task (an uncorrelated one is an init plan, run regardless)
      select r.*,
             case when r.supported and r.place <= coalesce(complete_hop.free_slots, 0)
                  then coalesce(r.priority, 0) >= coalesce((
                         select pgflow.message_priority(q.headers)
                           from pgflow.queue_access('head', lower(complete_hop.queue_name), null, null, null, null)
                                as q
                          where r.supported), -32768)
                  else false end as handed
        from ranked as r
    ), sends as (
      select d.queue_name, d.handed, case when d.handed then d.claim_seconds else 0 end as delay,
             array_agg(d.flow_slug order by d.k) as flows, array_agg(d.run_id order by d.k) as runs,
             array_agg(d.step_slug order by d.k) as steps,
             array_agg(jsonb_build_object('flow_slug', d.flow_slug, 'run_id', d.run_id,
                                          'step_slug', d.step_slug, 'task_index', 0) order by d.k) as messages,
             case when bool_or(d.priority <> 0)
                  then array_agg(case when d.priority <> 0 then jsonb_build_object('priority', d.priority) end
                                 order by d.k) end as headers
        from decided as d
       group by d.queue_name, d.handed, case when d.handed then d.claim_seconds else 0 end
    ), sent as (
      select g.queue_name, g.handed, m.flow_slug, m.run_id, m.step_slug, m.msg_id
        from sends as g
       cross join lateral rows from (
               unnest(g.flows), unnest(g.runs), unnest(g.steps),
               pgflow.queue_access('send', g.queue_name, null, array[g.delay], g.messages, g.headers)
             ) as m(flow_slug, run_id, step_slug, msg_id, read_ct, enqueued_at, last_read_at, vt, body, headers)
    ), inserted as (
      -- a handed task is queued and started at one instant, never started before it was queued
      insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name,
                                     status, attempts_count, queued_at, started_at, last_worker_id)
      select m.flow_slug, m.run_id, m.step_slug, 0, m.msg_id, m.queue_name,
             case when m.handed then 'started' else 'queued' end,
             case when m.handed then 1 else 0 end,
             c.now, case when m.handed then c.now end,
             case when m.handed then complete_hop.worker_id end
        from sent as m
       cross join lateral (select clock_timestamp() as now) as c
      returning step_tasks.message_id, step_tasks.flow_slug, step_tasks.run_id, step_tasks.step_slug,
                step_tasks.status
    )
    select array_agg(row('claimed', n.message_id, n.flow_slug, n.run_id, n.step_slug, 0, 1, null)::pgflow.claim_record)
      into v_claimed
      from inserted as n
     where n.status = 'started';
  end if;

  return query
    select 'completed'::text, null::bigint, null::text, i.run_id, i.step_slug, 0, null::integer, null::jsonb
      from unnest(v_runs, v_steps) as i(run_id, step_slug)
    union all
    select 'claimed'::text, c.message_id, c.flow_slug, c.run_id, c.step_slug, 0, 1,
           coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                       from pgflow.deps as d
                       join pgflow.step_states as dst
                         on dst.run_id = c.run_id and dst.run_id between v_lo and v_hi and dst.step_slug = d.dep_slug
                      where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
                    '{}'::jsonb)
      from unnest(coalesce(v_claimed, '{}')) as c
     order by 1 desc, 2, 4;  -- the items in task key order, then the tasks handed off in message order
end;
$$;

-- 0350_function_requeue_stalled_tasks.sql
-- Recovers tasks whose worker vanished: started tasks of started runs and steps (of handler steps:
-- an event or sleep task waits without a worker) whose claim is older
-- than the step's effective timeout + 30 s. Each is requeued (visible now) while it has been
-- requeued fewer than 3 times and has attempts left; otherwise it is marked permanently stalled and
-- exhausted like a task out of attempts, so its run still ends. Runs locked by another writer are
-- left for the next pass. The started runs are read flow by flow from the (flow_slug, status)
-- index and their tasks by probe, so a pass reads the runs in flight, not the history, with the
-- hot functions' planner settings. The flows are read in key order: a plain read of every flow is
-- a sequential scan, which those settings price so high (1e10) that the statement was compiled by
-- JIT on every call, 0.2-0.4 s.
create or replace function pgflow.requeue_stalled_tasks()
returns table (outcome text, task_count integer)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
    from (select f.flow_slug, f.opt_timeout from pgflow.flows as f order by f.flow_slug offset 0) as f
   cross join lateral (
     select r.run_id from pgflow.runs as r where r.flow_slug = f.flow_slug and r.status = 'started' offset 0
   ) as r
   cross join lateral (
     select t.run_id, t.step_slug, t.status, t.started_at from pgflow.step_tasks as t where t.run_id = r.run_id offset 0
   ) as t
    join pgflow.steps as s on s.flow_slug = f.flow_slug and s.step_slug = t.step_slug
   where t.status = 'started' and s.step_kind = 'handler'
     and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30);
  if v_candidates is null then
    if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
      perform pgflow.release_limit_slots(null);
    end if;
    return query select 'requeued'::text, 0 union all select 'permanently_stalled', 0;
    return;
  end if;

  select array_agg(l.run_id) into v_locked
    from (select r.run_id, r.status from pgflow.runs as r
           where r.run_id = any(v_candidates)
           order by r.run_id offset 0
             for update skip locked) as l
   where l.status = 'started';
  v_locked := coalesce(v_locked, '{}');

  with stalled as (
    select t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
           t.requeued_count < 3 and t.attempts_count - t.attempts_base < coalesce(s.opt_max_attempts, f.opt_max_attempts) as can_requeue
      from pgflow.step_tasks as t
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = any(v_locked) and t.status = 'started' and s.step_kind = 'handler'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
  ), requeued as (
    update pgflow.step_tasks as t
       set status = 'queued', requeued_count = t.requeued_count + 1, last_requeued_at = clock_timestamp(), queued_at = clock_timestamp()
      from stalled as st
     where st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.queue_name, t.message_id
  ), visible as (
    select pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]), 'set')
      from (select rq.queue_name, array_agg(rq.message_id) as ids
              from requeued as rq where rq.message_id is not null group by rq.queue_name) as g
  ), marked as (
    update pgflow.step_tasks as t
       set permanently_stalled_at = clock_timestamp()
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
    if (select r.status from pgflow.runs as r where r.run_id = v_stalled.run_id) = 'started'
       and exists (select 1 from pgflow.step_tasks as t
                    where t.run_id = v_stalled.run_id and t.step_slug = v_stalled.step_slug
                      and t.task_index = v_stalled.task_index and t.status = 'started') then
      perform pgflow.exhaust_task(v_stalled.run_id, v_stalled.step_slug, v_stalled.task_index,
                                  'permanently stalled: the task was requeued 3 times or ran out of attempts');
      v_exhausted := v_exhausted + 1;
    end if;
  end loop;
  -- last: the sweep's wake-ups lock waits (skip locked) that a claim holding the messages the
  -- exhaustions above wait for may update next; taken before those waits, they closed a cycle
  if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
    perform pgflow.release_limit_slots(null);
  end if;

  return query select 'requeued'::text, v_requeued union all select 'permanently_stalled', v_exhausted;
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

  delete from pgflow.step_waits as w using unnest(v_runs) as p(run_id) where w.run_id = p.run_id;
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

-- 0370_function_delete_flow_and_data.sql
-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it (a plain flow's default queue, a step-queued flow's private step queues, with
-- their archives), then the flow row last. Every queue of the persisted route (pgflow.flow_queues)
-- is validated first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- and tasks are locked before the queues' messages (run, task, message: the order every writer
-- uses). Messages are not archived one by one: dropping a queue drops its table and archive
-- together. Serialised with compilation by the per-flow advisory lock, and with starts by the
-- flow's start lock (taken exclusively: runs being started commit first, later starts find the flow
-- gone). Shared queues (pgflow.shared_queues) are never dropped: only this flow's live messages on
-- them are deleted, found through its task snapshots. The workers' support rows for the flow go too.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_queue text;
  v_spellings text[] := '{}';
  v_problem text;
  v_other text;
  v_shared_queues text[];
  v_shared_msgs bigint[];
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || flow_slug, 0));
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

  with gone as (
    delete from pgflow.step_tasks as t
     where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug)
    returning t.queue_name, t.message_id, t.status
  )
  select coalesce(array_agg(g.queue_name), '{}'), coalesce(array_agg(g.message_id), '{}')
    into v_shared_queues, v_shared_msgs
    from gone as g
    join pgflow.shared_queues as sq on sq.queue_name = g.queue_name
   where g.message_id is not null and g.status in ('queued', 'started');

  -- on shared queues, only this flow's own messages go (found through its task snapshots); the
  -- queues, their archives and every other message stay
  perform pgmq.delete(m.queue_name, array_agg(m.msg_id order by m.msg_id))
     from unnest(v_shared_queues, v_shared_msgs) as m(queue_name, msg_id)
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(m.queue_name, 'q'))) is not null
    group by m.queue_name;

  delete from pgflow.step_waits as w where w.flow_slug = delete_flow_and_data.flow_slug;
  -- parents of this flow's runs: their subflow tasks fail at the next wait pass (the child is gone)
  update pgflow.step_waits as w set due_at = clock_timestamp()
   where w.child_run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p where p.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_support as ws where ws.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
  perform pgflow.write_queue_access(wait => false);
end;
$$;

-- 0380_function_flow_shape.sql
-- The persisted shape of a flow, in the compiler's JSON form: ordered steps with slug, type, sorted
-- dependencies, when_unmet, when_exhausted, condition patterns and, for an event or sleep step, what
-- it waits for (wait: kind, event, key, seconds, until, flow; NULL for a handler step). Runtime options are
-- not shape.
create or replace function pgflow.flow_shape(flow_slug text)
returns jsonb
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
           'slug', s.step_slug,
           'step_type', s.step_type,
           'deps', coalesce((select jsonb_agg(d.dep_slug order by d.dep_slug) from pgflow.deps as d
                              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '[]'::jsonb),
           'when_unmet', s.when_unmet,
           'when_exhausted', s.when_exhausted,
           'required_input_pattern', s.required_input_pattern,
           'forbidden_input_pattern', s.forbidden_input_pattern,
           'wait', case when s.step_kind <> 'handler' then jsonb_strip_nulls(jsonb_build_object(
                     'kind', s.step_kind, 'event', s.wait_event, 'key', s.wait_key, 'seconds', s.wait_seconds,
                     'until', s.sleep_until, 'flow', s.subflow_slug)) end
         ) order by s.step_index), '[]'::jsonb))
    from pgflow.steps as s
   where s.flow_slug = flow_shape.flow_slug
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
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null'),
             'wait', coalesce(jsonb_strip_nulls(nullif(e->'wait', 'null'::jsonb)), 'null')
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
                                   'required_input_pattern', 'forbidden_input_pattern', 'wait'])
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
                                  ('timeout', f.opt_timeout), ('priority', f.opt_priority::integer)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout),
             opt_priority = coalesce((v_options->>'priority')::integer, f.opt_priority)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay),
                                  ('priority', s.opt_priority::integer)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer,
             opt_priority = (x.e->'options'->>'priority')::integer
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
  -- what an event, sleep or subflow step waits for (add_step creates every step as a handler step)
  update pgflow.steps as s
     set step_kind = x.e->'wait'->>'kind', wait_event = x.e->'wait'->>'event', wait_key = x.e->'wait'->>'key',
         wait_seconds = (x.e->'wait'->>'seconds')::integer, sleep_until = x.e->'wait'->>'until',
         subflow_slug = x.e->'wait'->>'flow'
    from jsonb_array_elements(shape->'steps') as x(e)
   where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
     and jsonb_typeof(x.e->'wait') = 'object';
  -- priority defaults are runtime options kept beside create_flow's and add_step's
  update pgflow.flows as f set opt_priority = (v_options->>'priority')::integer
   where f.flow_slug = ensure_flow_compiled.flow_slug and v_options->>'priority' is not null;
  update pgflow.steps as s set opt_priority = (x.e->'options'->>'priority')::integer
    from jsonb_array_elements(shape->'steps') as x(e)
   where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
     and x.e->'options'->>'priority' is not null;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;

-- 0445_function_retry_run.sql
-- Retries a failed (or cancelled) run from where it failed, in place: its completed steps and tasks
-- keep their outputs; every failed or cancelled task is queued again with a new message (with the
-- task's priority in its headers, as pgflow.start_ready_steps sends it), its step is
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
  v_waits integer;
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

  -- an event or sleep task waits again, in its next attempt, with no message (pgflow.start_waits)
  update pgflow.step_tasks as t
     set status = 'started', attempts_base = t.attempts_count, attempts_count = t.attempts_count + 1,
         started_at = clock_timestamp(), error_message = null, failed_at = null, queued_at = clock_timestamp(),
         requeued_count = 0, last_requeued_at = null, permanently_stalled_at = null
    from pgflow.steps as s
   where t.run_id = retry_run.run_id and t.status in ('failed', 'cancelled')
     and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug and s.step_kind <> 'handler';
  get diagnostics v_waits = row_count;
  if v_waits > 0 then
    perform pgflow.start_waits(array[retry_run.run_id]);
    v_count := v_waits;
  end if;

  for v_batch in
    select t.queue_name, array_agg(t.step_slug order by t.step_slug, t.task_index) as steps,
           array_agg(t.task_index order by t.step_slug, t.task_index) as indexes,
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.step_slug, t.task_index) as messages,
           array_agg(case when coalesce(r.priority, s.opt_priority, f.opt_priority) <> 0
                          then jsonb_build_object('priority', coalesce(r.priority, s.opt_priority, f.opt_priority)) end
                     order by t.step_slug, t.task_index) as headers
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
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
      join pgmq.send_batch(v_batch.queue_name, array(select unnest(v_batch.messages)), v_batch.headers, 0)
           with ordinality as sent(msg_id, n) on sent.n = k.n
     where t.run_id = retry_run.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index;
    v_count := v_count + cardinality(v_batch.steps);
  end loop;

  perform pgflow.start_ready_steps(array[retry_run.run_id]);
  return v_count;
end;
$$;

-- 0990_settings_hot_path.sql (for the functions created or replaced above)
alter function pgflow.start_waits(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.start_child_runs(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.wake_waits(integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.fail_child_run(uuid,text)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.end_waits(uuid,text,text[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.delete_expired_events(timestamptz,integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.send_event(text,jsonb,uuid,text,text,integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.maybe_complete_runs(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.start_ready_steps(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.requeue_stalled_tasks()
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
