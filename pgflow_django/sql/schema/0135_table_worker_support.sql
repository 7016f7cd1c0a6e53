-- The exact (flow_slug, step_slug) pairs a registered worker runs, and the queue it polls for each:
-- every step of its flow for a plain worker, one step for a step worker, every flow and queue for a
-- worker serving a whole project. Written when the worker registers; operators compare it with the
-- persisted routes (manage.py pgflow_coverage) before switching callers. queue_name is null in rows
-- written by workers older than 0038, whose one queue is pgflow.workers.queue_name.
create table pgflow.worker_support (
  worker_id uuid not null references pgflow.workers (worker_id) on delete cascade,
  flow_slug text not null,
  step_slug text not null,
  queue_name text,
  primary key (worker_id, flow_slug, step_slug)
);

create index worker_support_step_idx on pgflow.worker_support (flow_slug, step_slug);
