-- Retries a failed (or cancelled) run from where it failed, in place: its completed steps and tasks
-- keep their outputs; every failed or cancelled task is queued again with a new message (with the
-- task's priority in its headers, as pgflow.start_ready_steps sends it), its step is
-- started again, and the run is started again so its dependents follow. Returns the number of tasks
-- queued again. The run's and steps' errors are cleared (the admin's Retry action logs the run's
-- error first), and so is a failed task's output (the non-array that broke a map: a queued task has
-- none); each task keeps its attempt_errors.
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
         started_at = clock_timestamp(), error_message = null, output = null, failed_at = null, queued_at = clock_timestamp(),
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
       set status = 'queued', message_id = sent.msg_id, error_message = null, output = null, failed_at = null,
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
