-- Every private queue of a persisted flow's route: the default queue lower(flow_slug) of a plain
-- flow, and each step's queue of a plain or step-queued flow. A routed flow owns no queue: its
-- steps' shared queues (pgflow.shared_queues) outlive it.
create or replace function pgflow.flow_queues(flow_slug text)
returns setof text
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select lower(f.flow_slug) from pgflow.flows as f
   where f.flow_slug = flow_queues.flow_slug and f.queue_mode = 'flow'
  union
  select s.queue_name from pgflow.steps as s
    join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = flow_queues.flow_slug and f.queue_mode <> 'routed'
$$;
