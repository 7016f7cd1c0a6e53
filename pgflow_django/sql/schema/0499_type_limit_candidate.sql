-- One (task, limit) pair a claim has to decide (see pgflow.limit_claim): n is the task's position in
-- the claim's arrays, attempt the attempt the claim would start, scope the limit's step_slug ('' for
-- the flow), and delay the seconds a task denied by a rate limit waits for its token.
create type pgflow.limit_candidate as (
  n integer,
  run_id uuid,
  step_slug text,
  task_index integer,
  message_id bigint,
  attempt integer,
  flow_slug text,
  scope text,
  kind text,
  key text,
  amount integer,
  period double precision,
  burst integer
);
