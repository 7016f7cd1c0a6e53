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
  v_claimed pgflow.step_tasks[];
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

  with claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
           last_worker_id = start_shared_tasks.worker_id
      from unnest(v_runs, v_steps, v_indexes, v_outcomes) as k(run_id, step_slug, task_index, outcome)
     where k.outcome = 'claimed'
       and t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
       and t.status = 'queued'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  perform pgflow.set_vt_batch(v_queue, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2))
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug
   having count(*) > 0;

  perform pgflow.set_vt_batch(v_queue, array_agg(t.message_id),
                              array_agg(greatest(2, ceil(extract(epoch from
                                t.started_at + make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                                - clock_timestamp())))::integer))
     from unnest(v_runs, v_steps, v_indexes, v_outcomes) as k(run_id, step_slug, task_index, outcome)
     join pgflow.step_tasks as t
       on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
     join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     join pgflow.flows as f on f.flow_slug = t.flow_slug
    where k.outcome = 'started' and t.status = 'started'
   having count(*) > 0;

  perform pgflow.archive_task_messages(array_agg(v_queue), array_agg(e.id))
     from unnest(v_ids, v_outcomes) as e(id, outcome)
    where e.outcome = 'terminal'
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
      from unnest(v_ids, v_outcomes) as e(id, outcome)
     where e.outcome <> 'claimed'
        or not exists (select 1 from unnest(coalesce(v_claimed, '{}')) as c where c.message_id = e.id)
     order by 2;
end;
$$;
