-- One item of pgflow.complete_tasks, resolved against its task.
create type pgflow.completion_item as (
  run_id uuid,
  step_slug text,
  task_index integer,
  attempt integer,
  output jsonb,
  outcome text,
  flow_slug text,
  message_id bigint,
  step_type text,
  queue_name text
);
