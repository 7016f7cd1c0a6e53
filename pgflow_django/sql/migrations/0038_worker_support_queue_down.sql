-- Frozen migration delta 0038_worker_support_queue, down: pgflow.worker_support without queue_name
-- (a worker polling several queues is then counted on none of them until it stops).

-- 0135_table_worker_support.sql
alter table pgflow.worker_support drop column queue_name;
