-- Frozen migration delta 0036_return_unstarted_tasks, down: no pgflow.return_unstarted_tasks.

drop function if exists pgflow.return_unstarted_tasks(jsonb);
