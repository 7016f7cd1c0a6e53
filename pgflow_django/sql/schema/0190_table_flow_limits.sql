-- Flow control settings of a flow (step_slug '') or of one step, one row per kind:
--   concurrency  at most `amount` tasks of one key started at once
--   rate         a token bucket per key: `amount` tokens every `period` seconds, holding at most `burst`
-- The key of a task is read from its run: key_source 'none' (one key for the whole scope), 'input'
-- (the text of the run input's field key_field) or 'stored' (computed where the run started and kept
-- in run_limit_keys). Not part of the compiled shape: pgflow.set_flow_limits replaces a flow's rows
-- on every compile, so a changed limit applies to the next claim without a new flow version.
create table pgflow.flow_limits (
  flow_slug text not null references pgflow.flows (flow_slug) on delete cascade,
  step_slug text not null default '',
  kind text not null check (kind in ('concurrency', 'rate')),
  key_source text not null default 'none' check (key_source in ('none', 'input', 'stored')),
  key_field text check ((key_source = 'input') = (key_field is not null)),
  amount integer not null check (amount >= 1),
  period double precision check ((kind = 'rate') = (period is not null and period > 0)),
  burst integer check ((kind = 'rate') = (burst is not null and burst >= 1)),
  primary key (flow_slug, step_slug, kind)
);
