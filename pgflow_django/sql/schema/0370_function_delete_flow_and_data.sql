-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it (a plain flow's default queue, a step-queued flow's private step queues, with
-- their archives), then the flow row last. Every queue of the persisted route (pgflow.flow_queues)
-- is validated first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- and tasks are locked before the queues' messages (run, task, message: the order every writer
-- uses). Messages are not archived one by one: dropping a queue drops its table and archive
-- together. Serialised with compilation by the per-flow advisory lock, and with starts by the
-- flow's start lock (taken exclusively: runs being started commit first, later starts find the flow
-- gone). Shared queues (pgflow.shared_queues) are never dropped: only this flow's live messages on
-- them are deleted, found through its task snapshots. The workers' support rows for the flow go too;
-- its pauses too, except a pause of the flow's slug while another version of the flow remains.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_queue text;
  v_spellings text[] := '{}';
  v_problem text;
  v_other text;
  v_shared_queues text[];
  v_shared_msgs bigint[];
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  perform 1 from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug order by r.run_id for update;

  select coalesce(array_agg(distinct q order by q), '{}') into v_queues
    from pgflow.flow_queues(delete_flow_and_data.flow_slug) as q;

  foreach v_queue in array v_queues loop
    select s.flow_slug into v_other from pgflow.steps as s
     where s.queue_name = v_queue and s.flow_slug <> delete_flow_and_data.flow_slug limit 1;
    if v_other is not null then
      raise exception 'cannot delete flow %: its queue % is also used by flow %; nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), quote_literal(v_other) using errcode = '55000';
    end if;
    if not exists (select 1 from pgmq.meta as m where lower(m.queue_name) = v_queue)
       and not exists (select 1 from pgflow.steps as s
                        where s.flow_slug = delete_flow_and_data.flow_slug and s.queue_name = v_queue) then
      continue;
    end if;
    begin
      v_spellings := v_spellings || pgflow.resolve_queue_spelling(v_queue);
    exception when others then
      raise exception 'cannot delete flow %: %; nothing was deleted', quote_literal(flow_slug), sqlerrm
        using errcode = '55000';
    end;
    v_problem := pgflow.queue_objects_problem(v_queue);
    if v_problem is not null then
      raise exception 'cannot delete flow %: queue % is malformed (%); repair or drop it by hand, nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), v_problem using errcode = '55000';
    end if;
  end loop;

  with gone as (
    delete from pgflow.step_tasks as t
     where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug)
    returning t.queue_name, t.message_id, t.status
  )
  select coalesce(array_agg(g.queue_name), '{}'), coalesce(array_agg(g.message_id), '{}')
    into v_shared_queues, v_shared_msgs
    from gone as g
    join pgflow.shared_queues as sq on sq.queue_name = g.queue_name
   where g.message_id is not null and g.status in ('queued', 'started');

  -- on shared queues, only this flow's own messages go (found through its task snapshots); the
  -- queues, their archives and every other message stay
  perform pgmq.delete(m.queue_name, array_agg(m.msg_id order by m.msg_id))
     from unnest(v_shared_queues, v_shared_msgs) as m(queue_name, msg_id)
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(m.queue_name, 'q'))) is not null
    group by m.queue_name;

  delete from pgflow.step_waits as w where w.flow_slug = delete_flow_and_data.flow_slug;
  -- parents of this flow's runs: their subflow tasks fail at the next wait pass (the child is gone)
  update pgflow.step_waits as w set due_at = clock_timestamp()
   where w.child_run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p
   where p.flow_slug = delete_flow_and_data.flow_slug
     and not exists (select 1 from pgflow.flows as f  -- a pause of the flow's slug holds its other versions
                      where f.version_of = pgflow.version_of(delete_flow_and_data.flow_slug)
                        and f.flow_slug <> delete_flow_and_data.flow_slug);
  delete from pgflow.worker_support as ws where ws.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
  perform pgflow.write_queue_access(wait => false);
end;
$$;
