-- Pauses a worker subscription (a flow, or a flow and step): its workers stop polling at their next
-- heartbeat and new ones refuse to start until pgflow.resume_subscription. An operator pause never
-- replaces a fatal one (the fatal detail is what an operator must read before resuming). A flow's
-- slug may be paused while any version of it exists (the pause holds every version; a version's
-- stored slug pauses that version).
create or replace function pgflow.pause_subscription(
  flow_slug text, step_slug text default '', reason text default 'operator', detail text default null
)
returns pgflow.worker_pauses
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_pause pgflow.worker_pauses;
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = pause_subscription.flow_slug)
     and (pause_subscription.flow_slug <> pgflow.version_of(pause_subscription.flow_slug)
          or not exists (select 1 from pgflow.flows as f where f.version_of = pause_subscription.flow_slug)) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  if coalesce(step_slug, '') <> '' and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug in (pause_subscription.flow_slug, pgflow.flow_version(pause_subscription.flow_slug))
          and s.step_slug = pause_subscription.step_slug) then
    raise exception 'flow % has no step %', quote_literal(flow_slug), quote_literal(step_slug) using errcode = '22023';
  end if;
  insert into pgflow.worker_pauses as p (flow_slug, step_slug, queue_name, reason, detail)
  values (flow_slug, coalesce(step_slug, ''),
          coalesce((select s.queue_name from pgflow.steps as s
                     where s.flow_slug = pause_subscription.flow_slug
                       and s.step_slug = pause_subscription.step_slug), lower(flow_slug)),
          reason, detail)
  on conflict on constraint worker_pauses_pkey do update
    set reason = excluded.reason, detail = excluded.detail, paused_at = clock_timestamp()
    where p.reason <> 'fatal' or excluded.reason = 'fatal';
  select * into v_pause from pgflow.worker_pauses as p
   where p.flow_slug = pause_subscription.flow_slug and p.step_slug = coalesce(pause_subscription.step_slug, '');
  return v_pause;
end;
$$;
