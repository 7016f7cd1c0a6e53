-- Clears a subscription's pause, fatal or operator; true when there was one.
create or replace function pgflow.resume_subscription(flow_slug text, step_slug text default '')
returns boolean
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  delete from pgflow.worker_pauses as p
   where p.flow_slug = resume_subscription.flow_slug and p.step_slug = coalesce(resume_subscription.step_slug, '');
  return found;
end;
$$;
