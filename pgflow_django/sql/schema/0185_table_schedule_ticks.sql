-- The ledger of fired ticks: one row per (schedule, tick), written in the transaction that starts the
-- tick's run, so a tick is fired once or (when that transaction is lost) not at all. `kind` is 'cron'
-- for a planned tick and 'manual' for pgflow.trigger_schedule. The run id is kept even after the run
-- is pruned. Deleting a schedule deletes its ledger; a declared schedule is never deleted by a sync.
create table pgflow.schedule_ticks (
  schedule_name text not null references pgflow.schedules (schedule_name) on delete cascade,
  tick timestamptz not null,
  run_id uuid not null,
  kind text not null default 'cron' check (kind in ('cron', 'manual')),
  fired_at timestamptz not null default clock_timestamp(),
  primary key (schedule_name, tick)
);

create index schedule_ticks_run_idx on pgflow.schedule_ticks (run_id);
