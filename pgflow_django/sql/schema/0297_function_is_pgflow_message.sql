-- Whether a message body looks like pgflow work: a JSON object carrying flow_slug, run_id (a uuid),
-- step_slug and a non-negative integer task_index. Used only to classify messages that match no
-- task; a body never authorises work.
create or replace function pgflow.is_pgflow_message(message jsonb)
returns boolean
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select coalesce(
    jsonb_typeof(message) = 'object'
    and jsonb_typeof(message->'flow_slug') = 'string'
    and jsonb_typeof(message->'step_slug') = 'string'
    and jsonb_typeof(message->'run_id') = 'string'
    and (message->>'run_id') ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
    and jsonb_typeof(message->'task_index') = 'number'
    and (message->>'task_index') ~ '^[0-9]+$',
    false)
$$;
