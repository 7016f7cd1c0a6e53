-- The events pgflow.send_event delivered, kept until expires_at for the waits that start later (an
-- event reaches every wait for it that starts before it expires, each wait the earliest one), and
-- for event_id, which makes a repeated send a no-op while the first is kept. An event is sent to one
-- run (run_id) or to every run whose wait key has its value (event_key). No foreign key: a run may
-- be pruned before its events expire.
create table pgflow.events (
  event_seq bigint generated always as identity primary key,
  event_name text not null check (event_name <> ''),
  run_id uuid,
  event_key text,
  payload jsonb not null default 'null'::jsonb,
  event_id text check (event_id <> ''),
  sent_at timestamptz not null default clock_timestamp(),
  expires_at timestamptz not null,
  check ((run_id is null) <> (event_key is null))
);

create unique index events_event_id_key on pgflow.events (event_name, event_id) where event_id is not null;
create index events_run_idx on pgflow.events (event_name, run_id, event_seq) where run_id is not null;
create index events_key_idx on pgflow.events (event_name, event_key, event_seq) where event_key is not null;
create index events_expires_at_idx on pgflow.events (expires_at);
