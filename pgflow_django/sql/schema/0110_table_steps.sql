create table pgflow.steps (
  flow_slug text not null references pgflow.flows (flow_slug),
  step_slug text not null check (pgflow.is_valid_slug(step_slug)),
  step_type text not null default 'single' check (step_type in ('single', 'map')),
  step_index integer not null check (step_index >= 0),
  deps_count integer not null default 0 check (deps_count >= 0),
  opt_max_attempts integer check (opt_max_attempts >= 1),
  opt_base_delay integer check (opt_base_delay >= 0),
  opt_timeout integer check (opt_timeout >= 1),
  opt_start_delay integer check (opt_start_delay >= 0),
  required_input_pattern jsonb check (required_input_pattern is null or jsonb_typeof(required_input_pattern) = 'object'),
  forbidden_input_pattern jsonb check (forbidden_input_pattern is null or jsonb_typeof(forbidden_input_pattern) = 'object'),
  when_unmet text not null default 'skip' check (when_unmet in ('fail', 'skip', 'skip-cascade')),
  when_exhausted text not null default 'fail' check (when_exhausted in ('fail', 'skip', 'skip-cascade')),
  created_at timestamptz not null default clock_timestamp(),
  queue_name text not null constraint steps_queue_name_check check (pgflow.is_valid_queue_name(queue_name)),
  -- the priority of this step's tasks in a run started without one (NULL: the flow's opt_priority)
  opt_priority smallint check (opt_priority between -100 and 100),
  -- what completes the step's task: 'handler' (a worker runs it), 'event' (pgflow.send_event delivers
  -- an event named wait_event; wait_key is a JSON path into the run's input whose value the event
  -- is keyed by; wait_seconds its timeout), 'sleep' (a time: wait_seconds after it starts, or the
  -- timestamp at the JSON path sleep_until in its input) or 'subflow' (a run of the flow
  -- subflow_slug ends: one per task, a map's one per element). None of the last three holds a message.
  step_kind text not null default 'handler' constraint steps_step_kind_check
    check (step_kind in ('handler', 'event', 'sleep', 'subflow')),
  wait_event text constraint steps_wait_event_check check (wait_event <> ''),
  wait_key text constraint steps_wait_key_check check (wait_key ~ '^\$(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+$'),
  wait_seconds integer constraint steps_wait_seconds_check check (wait_seconds >= 0),
  sleep_until text constraint steps_sleep_until_check
    check (sleep_until ~ '^\$(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+$'),
  subflow_slug text constraint steps_subflow_slug_check check (subflow_slug is null or pgflow.is_valid_slug(subflow_slug)),
  primary key (flow_slug, step_slug),
  unique (flow_slug, step_index),
  check (step_type <> 'map' or deps_count <= 1),
  constraint steps_wait_check check (case step_kind
    when 'handler' then wait_event is null and wait_key is null and wait_seconds is null and sleep_until is null
                        and subflow_slug is null
    when 'event' then wait_event is not null and sleep_until is null and subflow_slug is null and step_type = 'single'
    when 'sleep' then wait_event is null and wait_key is null and (wait_seconds is null) <> (sleep_until is null)
                      and subflow_slug is null and step_type = 'single'
    else subflow_slug is not null and wait_event is null and wait_key is null and wait_seconds is null
         and sleep_until is null end)
);

create unique index steps_slug_lower_key on pgflow.steps (flow_slug, lower(step_slug));
