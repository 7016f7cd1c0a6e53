create type pgflow.step_task_record as (
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  message_id bigint,
  attempt integer,
  input jsonb
);
