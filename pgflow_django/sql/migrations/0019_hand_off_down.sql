-- Frozen migration delta 0019_hand_off, down: no hand-off (workers complete with complete_tasks).
drop function pgflow.complete_and_hand_off(items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[], support_generations bigint[], free_slots integer);
drop function pgflow.hand_off_tasks(queue_name text, worker_id uuid, run_ids uuid[], support_flows text[], support_steps text[], support_generations bigint[], free_slots integer);
