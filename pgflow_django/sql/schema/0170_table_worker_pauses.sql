-- One persisted switch per worker subscription (a plain worker's subscription is (flow_slug, '')).
-- A row exists only while the subscription is paused: 'fatal' is set by a claim that met
-- unsupported work, 'operator' by pgflow_pause. Workers refuse to start while paused and running
-- ones stop at their next heartbeat; pgflow_resume deletes the row.
create table pgflow.worker_pauses (
  flow_slug text not null,
  step_slug text not null default '',
  queue_name text not null,
  reason text not null check (reason in ('fatal', 'operator')),
  detail text,
  paused_at timestamptz not null default clock_timestamp(),
  primary key (flow_slug, step_slug)
);
