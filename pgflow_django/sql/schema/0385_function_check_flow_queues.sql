-- Verifies that every queue of a persisted flow's route (pgflow.flow_queues) exists exactly once in
-- pgmq.meta with its queue table, archive table and sequence.
create or replace function pgflow.check_flow_queues(flow_slug text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
declare
  v_queue text;
  v_problem text;
begin
  for v_queue in
    select q from pgflow.flow_queues(check_flow_queues.flow_slug) as q
  loop
    perform pgflow.resolve_queue_spelling(v_queue);
    v_problem := pgflow.queue_objects_problem(v_queue);
    if v_problem is not null then
      raise exception 'queue % of flow % is malformed: %', quote_literal(v_queue), quote_literal(flow_slug), v_problem
        using errcode = '55000';
    end if;
  end loop;
end;
$$;
