-- One row per (scope, kind, key) seen by a claim: the lock every claim of that key takes before it
-- counts the key's holds (concurrency) or spends its tokens (rate), so concurrent claims on any number
-- of workers decide one after the other. For a rate key, tokens as of refilled_at.
create table pgflow.limit_slots (
  flow_slug text not null references pgflow.flows (flow_slug) on delete cascade,
  step_slug text not null,
  kind text not null check (kind in ('concurrency', 'rate')),
  key text not null,
  tokens double precision not null default 0,
  refilled_at timestamptz not null default clock_timestamp(),
  granted_at timestamptz,
  primary key (flow_slug, step_slug, kind, key)
);
