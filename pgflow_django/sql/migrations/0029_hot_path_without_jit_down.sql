-- Frozen migration delta 0029_hot_path_without_jit, down: the hot functions plan with JIT as 0028 left them.

alter function pgflow.archive_task_messages(text[],bigint[]) reset jit;
alter function pgflow.cascade(uuid[]) reset jit;
alter function pgflow.claim_classified(text,uuid,bigint[],uuid[],text[],integer[],text[],text[]) reset jit;
alter function pgflow.classify_claim(text,bigint[],text[],text[],text,text) reset jit;
alter function pgflow.complete_and_hand_off(jsonb,text,uuid,text[],text[],bigint[],integer) reset jit;
alter function pgflow.complete_tasks(jsonb) reset jit;
alter function pgflow.fail_task(uuid,text,integer,integer,text,integer) reset jit;
alter function pgflow.hand_off_tasks(text,uuid,uuid[],text[],text[],bigint[],integer) reset jit;
alter function pgflow.limit_claim(text,bigint[],uuid[],text[],integer[],text[]) reset jit;
alter function pgflow.lock_claimed_task(uuid,text,integer,integer) reset jit;
alter function pgflow.maybe_complete_runs(uuid[]) reset jit;
alter function pgflow.release_limit_slots(uuid[],boolean) reset jit;
alter function pgflow.requeue_stalled_tasks() reset jit;
alter function pgflow.start_flows(text,jsonb,uuid[],integer,integer) reset jit;
alter function pgflow.start_ready_steps(uuid[]) reset jit;
alter function pgflow.start_shared_tasks(text,bigint[],uuid,text[],text[]) reset jit;
alter function pgflow.start_tasks(text,text,bigint[],uuid,text) reset jit;
