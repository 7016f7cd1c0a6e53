-- Frozen migration delta 0038_worker_support_queue (loaded by pgflow_django/migrations/0038_worker_support_queue.py):
-- one worker process may poll many queues (manage.py pgflow_worker with no selection serves every
-- flow), so each row of pgflow.worker_support records the queue of its (flow, step) pair. Such a
-- worker's pgflow.workers.queue_name is '*'. Existing rows take their worker's one queue; rows of
-- workers still running the previous release stay null and mean that queue.

-- 0135_table_worker_support.sql
alter table pgflow.worker_support add column queue_name text;

update pgflow.worker_support as s
   set queue_name = w.queue_name
  from pgflow.workers as w
 where w.worker_id = s.worker_id;
