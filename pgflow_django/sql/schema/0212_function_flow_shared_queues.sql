-- The shared queues a flow's tasks can be on: its route's (a routed flow) and any queue its task
-- snapshots name that is declared shared. Deleting the flow removes its own messages from them,
-- never the queues.
create or replace function pgflow.flow_shared_queues(flow_slug text)
returns setof text
language sql
stable
as $$
  select s.queue_name from pgflow.steps as s
    join pgflow.shared_queues as sq on sq.queue_name = s.queue_name
   where s.flow_slug = flow_shared_queues.flow_slug
  union
  select t.queue_name from pgflow.step_tasks as t
    join pgflow.shared_queues as sq on sq.queue_name = t.queue_name
   where t.flow_slug = flow_shared_queues.flow_slug
$$;
