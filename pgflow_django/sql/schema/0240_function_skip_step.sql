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
