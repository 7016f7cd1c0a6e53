-- One message of a claim batch and what the claim did with it (see pgflow.start_tasks).
create type pgflow.claim_record as (
  outcome text,
  message_id bigint,
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  attempt integer,
  input jsonb
);
