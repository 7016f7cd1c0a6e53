-- The first half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks: each
-- distinct message id of the batch with its task, found by persisted identity ((queue_name,
-- message_id) -> task, then its run and step state; each a lateral LIMIT 1, which PostgreSQL does not
-- flatten into a join, so the plan stays an index probe per message whatever the table statistics
-- say: planned on empty tables, a plain join to runs was a full walk of runs_pkey), and its outcome:
--   <no_task>      no task has this message (start_tasks passes NULL and judges the body next)
--   <unsupported>  the task is not one of the (flow_slug, step_slug) pairs of the support set
--   terminal, started, claimed (a queued task in a started run and step), ineligible (otherwise)
-- The arrays are in task key order, the order in which every other writer locks a run's tasks.
-- PL/pgSQL with a generic plan: a SQL function's statement is planned again on every call, a
-- PL/pgSQL one once per session; the plan is index probes by (queue_name, message_id), run_id and
-- (run_id, step_slug), good for any table size.
create or replace function pgflow.classify_claim(
  queue_name text, msg_ids bigint[], support_flows text[], support_steps text[], no_task text, unsupported text,
  out ids bigint[], out runs uuid[], out steps text[], out indexes integer[], out outcomes text[]
)
language plpgsql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
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
    left join lateral (
      select r.status from pgflow.runs as r where r.run_id = t.run_id limit 1
    ) as r on true
    left join lateral (
      select ss.status from pgflow.step_states as ss
       where ss.run_id = t.run_id and ss.step_slug = t.step_slug
       limit 1
    ) as ss on true
    into classify_claim.ids, classify_claim.runs, classify_claim.steps, classify_claim.indexes,
         classify_claim.outcomes;
end;
$$;
