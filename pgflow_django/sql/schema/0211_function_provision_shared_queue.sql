-- The one path that declares, and creates when absent, a shared queue (the compiler calls it for each
-- queue of a routed flow). A queue already declared shared is reused (created again through PGMQ if
-- it went missing). Refused: an invalid name, a name containing '__' (reserved for generated
-- queues, so never a step queue), the default queue name of a flow (a plain flow's queue), and an
-- existing PGMQ queue (pgmq.list_queues, compared case-insensitively) that pgflow never declared:
-- pgflow never adopts or converts a queue.
create or replace function pgflow.provision_shared_queue(queue_name text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queue text := queue_name;
  v_listed text[];
  v_owner text;
begin
  if not pgflow.is_valid_queue_name(v_queue) or position('__' in v_queue) > 0 then
    raise exception 'shared queue name % is invalid: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
      quote_literal(coalesce(v_queue, 'NULL'))
      using errcode = '22023';
  end if;
  perform pgmq.validate_queue_name(v_queue);
  -- the common case, a queue declared and present, takes no lock: compilations that verify several
  -- flows on one queue in one transaction never wait on each other (declarations are never removed
  -- by pgflow)
  if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue)
     and (select count(*) from pgmq.list_queues() as l where lower(l.queue_name) = v_queue) = 1 then
    return;
  end if;
  perform pg_advisory_xact_lock(hashtextextended('pgflow:shared_queue:' || v_queue, 0));

  select f.flow_slug into v_owner from pgflow.flows as f
   where lower(f.flow_slug) = v_queue limit 1;
  if v_owner is not null then
    raise exception 'queue name % is the default queue name reserved for flow %: choose another shared queue name',
      quote_literal(v_queue), quote_literal(v_owner)
      using errcode = '23505';
  end if;

  select array_agg(l.queue_name::text order by l.queue_name) into v_listed
    from pgmq.list_queues() as l where lower(l.queue_name) = v_queue;
  if cardinality(v_listed) > 1 then
    raise exception 'shared queue % is ambiguous: PGMQ lists % for the same tables; remove the aliases you do not use',
      quote_literal(v_queue), array_to_string(v_listed, ', ')
      using errcode = '21000';
  end if;

  if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue) then
    if v_listed is null then
      perform pgmq.create(v_queue);
      execute format(
        'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
        pgmq.format_table_name(v_queue, 'q'));
      perform pgflow.index_queue_priority(v_queue);
      perform pgflow.write_queue_access(v_queue, wait => false);
    end if;
    return;
  end if;
  if v_listed is not null then
    raise exception 'PGMQ queue % exists but was not declared shared by pgflow: pgflow never adopts an existing queue; choose another name, or drop the queue (pgmq.drop_queue) if it is unused',
      quote_literal(v_listed[1])
      using errcode = '23505';
  end if;

  perform pgmq.create(v_queue);
  insert into pgflow.shared_queues (queue_name) values (v_queue);
  execute format(
    'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
    pgmq.format_table_name(v_queue, 'q'));
  perform pgflow.index_queue_priority(v_queue);
  perform pgflow.write_queue_access(v_queue, wait => false);
end;
$$;
