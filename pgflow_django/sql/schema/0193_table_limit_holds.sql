-- The concurrency slots held: one row per started task and limited scope, written by the claim that
-- starts it (attempt = the claimed attempt). A hold counts only while its task is still started in
-- that attempt, so a path that ends a task without releasing can never leak a slot;
-- pgflow.release_limit_slots deletes the holds that stopped counting and wakes a waiter per slot.
-- No foreign keys: the claim must never wait for a run's lock (see pgflow.claim_classified).
create table pgflow.limit_holds (
  run_id uuid not null,
  task_step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  step_slug text not null,
  key text not null,
  attempt integer not null,
  held_at timestamptz not null default clock_timestamp(),
  primary key (run_id, task_step_slug, task_index, step_slug)
);

create index limit_holds_key_idx on pgflow.limit_holds (flow_slug, step_slug, key);
