-- The pause of a worker subscription, or NULL when it may run. A plain worker's subscription is
-- (flow_slug, ''); a pause of the whole flow also holds its step subscriptions, and an operator's pause
-- of a flow's slug holds every version of it (a version's stored slug pauses that version only; a fatal
-- pause, set by a claim, holds the version whose queue it was set on).
create or replace function pgflow.subscription_pause(flow_slug text, step_slug text default '')
returns pgflow.worker_pauses
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select p.* from pgflow.worker_pauses as p
   where (p.flow_slug = subscription_pause.flow_slug
          or p.flow_slug = pgflow.version_of(subscription_pause.flow_slug) and p.reason = 'operator')
     and p.step_slug in ('', coalesce(subscription_pause.step_slug, ''))
   order by (p.reason = 'fatal') desc, p.step_slug desc
   limit 1
$$;
