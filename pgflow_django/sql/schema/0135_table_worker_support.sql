-- The exact (flow_slug, step_slug) pairs a registered worker runs on its queue: every step of its
-- flow for a plain worker, one step for a step worker. Written when the worker registers; operators
-- compare it with the persisted routes (manage.py pgflow_coverage) before switching callers.
create table pgflow.worker_support (
  worker_id uuid not null references pgflow.workers (worker_id) on delete cascade,
  flow_slug text not null,
  step_slug text not null,
  primary key (worker_id, flow_slug, step_slug)
);

create index worker_support_step_idx on pgflow.worker_support (flow_slug, step_slug);
