-- Every queue the engine sends to: plain flows' default queues, the steps' queues and the declared
-- shared queues. The queues pgflow writes static SQL for (write_queue_access) and partitions the
-- archives of (create_history_partitions).
create or replace function pgflow.engine_queues()
returns setof text
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select s.queue_name from pgflow.steps as s
  union
  select lower(f.flow_slug) from pgflow.flows as f where f.queue_mode = 'flow'
  union
  select sq.queue_name from pgflow.shared_queues as sq
$$;
