-- Every queue of a persisted flow's route: the default queue lower(flow_slug) of a plain flow, and
-- each step's queue. A step-queued flow owns only its steps' generated queues.
create or replace function pgflow.flow_queues(flow_slug text)
returns setof text
language sql
stable
as $$
  select lower(f.flow_slug) from pgflow.flows as f
   where f.flow_slug = flow_queues.flow_slug and f.queue_mode = 'flow'
  union
  select s.queue_name from pgflow.steps as s where s.flow_slug = flow_queues.flow_slug
$$;
