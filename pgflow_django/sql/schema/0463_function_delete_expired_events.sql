-- Deletes up to max_events events kept past their expiry (pgflow.events.expires_at at or before
-- expired_at), oldest first, but not one pinned to a wait that has not taken it yet: the wait pass
-- delivers it first, however late. Called by pgflow.wake_waits; skips rows another pass is deleting.
create or replace function pgflow.delete_expired_events(expired_at timestamptz, max_events integer)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_deleted integer;
begin
  delete from pgflow.events as e
   where e.event_seq in (
           select x.event_seq from pgflow.events as x
            where x.expires_at <= delete_expired_events.expired_at
              and not exists (select 1 from pgflow.step_waits as w where w.event_seq = x.event_seq offset 0)
            order by x.expires_at
            limit delete_expired_events.max_events
              for update skip locked);
  get diagnostics v_deleted = row_count;
  return v_deleted;
end;
$$;
