-- The keys a run's tasks are limited by when the flow computes them in Python (a callable key):
-- written in the transaction that starts the run, read by the claim. step_slug '' is the flow's.
create table pgflow.run_limit_keys (
  run_id uuid not null references pgflow.runs (run_id) on delete cascade,
  step_slug text not null default '',
  kind text not null check (kind in ('concurrency', 'rate')),
  key text not null,
  primary key (run_id, step_slug, kind)
);
