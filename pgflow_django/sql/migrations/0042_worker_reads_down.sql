-- Frozen down delta of 0042_worker_reads: back to 0041_complete_hop (workers of that release read the
-- priority, trace contexts and transitions in their own statements).

drop function pgflow.task_transitions(uuid[], text[], integer[]);
drop function pgflow.task_details(uuid[], text[], boolean);
