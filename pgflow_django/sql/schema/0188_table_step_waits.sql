-- The tasks of event, sleep and subflow steps that wait now: one row from the moment the task starts until it
-- ends (its event, its time, its timeout, or its run failing), so the table holds only what waits
-- and its size never grows with the history. A waiting task holds no queue message and no worker.
-- event_seq: the event pinned to this wait by a start that found one kept, or by a send that could
-- not lock the run; the wait is then due at once and pgflow.wake_waits delivers it.
create table pgflow.step_waits (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null default 0 check (task_index >= 0),
  flow_slug text not null,
  -- the task's attempt this wait belongs to: the completion is fenced by it
  attempt integer not null check (attempt >= 1),
  kind text not null check (kind in ('event', 'sleep', 'subflow')),
  event_name text,
  -- the text of the JSON value at the step's wait_key in the run's input (NULL: not keyed)
  event_key text,
  -- a sleep's time; an event wait's timeout (NULL: none)
  due_at timestamptz,
  since timestamptz not null default clock_timestamp(),
  event_seq bigint,
  -- why the wait cannot go on (a sleep time that is not a timestamp, a child flow not compiled): it
  -- fails when due. On a subflow wait with a child run: the reason its child must fail (its run failed
  -- or its step was skipped while another writer held the child; pgflow.end_waits)
  error_message text,
  -- a subflow task's child run: its end makes the wait due
  child_run_id uuid,
  primary key (run_id, step_slug, task_index),
  check ((kind = 'event') = (event_name is not null)),
  check (kind = 'event' or event_seq is null),
  check (kind = 'subflow' or child_run_id is null)
);

-- the due waits, read by pgflow.wake_waits in time order
create index step_waits_due_at_idx on pgflow.step_waits (due_at) where due_at is not null;
-- the waits a keyed event ends (a run's own are found by the primary key)
create index step_waits_event_key_idx on pgflow.step_waits (event_name, event_key) where event_key is not null;
-- the wait a child run's end makes due
create index step_waits_child_run_id_idx on pgflow.step_waits (child_run_id) where child_run_id is not null;
-- the events pinned to a wait, which pgflow.wake_waits keeps past their expiry until delivered
create index step_waits_event_seq_idx on pgflow.step_waits (event_seq) where event_seq is not null;
