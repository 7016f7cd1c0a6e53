-- What is wrong with a PGMQ queue's physical objects (queue table, archive table, message id
-- sequence), or NULL when all are there.
create or replace function pgflow.queue_objects_problem(queue_name text)
returns text
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select nullif(concat_ws(', ',
           case when to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'q'))) is null
                then 'queue table pgmq.' || pgmq.format_table_name(queue_name, 'q') || ' is missing' end,
           case when to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'a'))) is null
                then 'archive table pgmq.' || pgmq.format_table_name(queue_name, 'a') || ' is missing' end,
           case when to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'q') || '_msg_id_seq')) is null
                then 'sequence pgmq.' || pgmq.format_table_name(queue_name, 'q') || '_msg_id_seq is missing' end
         ), '')
$$;
