create table pgflow.runs (
  run_id uuid primary key default pgflow.uuid_v7(),
  -- no foreign key: see pgflow.refuse_flow_in_use
  flow_slug text not null,
  status text not null default 'started' check (status in ('started', 'completed', 'failed')),
  input jsonb not null,
  output jsonb,
  error_message text,
  remaining_steps integer not null default 0 check (remaining_steps >= 0),
  started_at timestamptz not null default clock_timestamp(),
  completed_at timestamptz,
  failed_at timestamptz,
  rerun_of uuid constraint runs_rerun_of_fkey references pgflow.runs (run_id) on delete set null,
  -- a run started with a delay: its first tasks' messages become visible no earlier than this
  not_before timestamptz,
  -- the W3C trace context (traceparent, tracestate) of the code that started the run, when traced
  trace_context jsonb,
  -- the priority the run was started with (-100..100; higher is claimed first), or NULL: its steps'
  -- and its flow's defaults apply (pgflow.start_ready_steps sends it in each message's headers)
  priority smallint check (priority between -100 and 100),
  -- a child run: the run, step and task (one per element of a map) of the subflow step that started
  -- it (no foreign key: a pruned parent leaves them as they were)
  parent_run_id uuid,
  parent_step_slug text,
  parent_task_index integer,
  check (completed_at is null or status = 'completed'),
  check (failed_at is null or status = 'failed')
) with (fillfactor = 50);

-- fillfactor 50: a completion batch updates every run of a page in one transaction, and an update
-- that finds no room on its page is neither HOT nor cheap (it also writes a row-lock record for the
-- old version); with batches of 100, 21% of a 3-step chain's run updates were HOT at 100, 66% at
-- 50. The last update sets the status, which the index below holds, so it is never HOT.
create index runs_flow_status_idx on pgflow.runs (flow_slug, status);
create index runs_started_at_idx on pgflow.runs (started_at);
-- the reruns of a run: deleting a run sets their rerun_of to NULL, a probe here instead of a scan of
-- runs per deleted run (which made pruning quadratic in the history's size)
create index runs_rerun_of_idx on pgflow.runs (rerun_of) where rerun_of is not null;
-- the children of a run (get_run's child_run_ids, a parent's cancel), by probe
create index runs_parent_run_id_idx on pgflow.runs (parent_run_id) where parent_run_id is not null;
