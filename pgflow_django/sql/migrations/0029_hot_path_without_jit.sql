-- Frozen migration delta 0029_hot_path_without_jit (loaded by pgflow_django/migrations/0029_hot_path_without_jit.py):
-- the hot functions turn JIT compilation off. Their generic plans price every partition of a
-- partitioned history (and a batch's rows times each of them), so on a partitioned install a
-- statement that reads no row at all could cost more than jit_above_cost, and PostgreSQL then
-- compiled it on every execution: 70-120 ms per completion with 15 daily partitions, where the
-- statement itself takes under a millisecond. The hot statements are index probes of a few rows;
-- compiling them never pays back.

alter function pgflow.archive_task_messages(text[],bigint[]) set jit = off;
alter function pgflow.cascade(uuid[]) set jit = off;
alter function pgflow.claim_classified(text,uuid,bigint[],uuid[],text[],integer[],text[],text[]) set jit = off;
alter function pgflow.classify_claim(text,bigint[],text[],text[],text,text) set jit = off;
alter function pgflow.complete_and_hand_off(jsonb,text,uuid,text[],text[],bigint[],integer) set jit = off;
alter function pgflow.complete_tasks(jsonb) set jit = off;
alter function pgflow.fail_task(uuid,text,integer,integer,text,integer) set jit = off;
alter function pgflow.hand_off_tasks(text,uuid,uuid[],text[],text[],bigint[],integer) set jit = off;
alter function pgflow.limit_claim(text,bigint[],uuid[],text[],integer[],text[]) set jit = off;
alter function pgflow.lock_claimed_task(uuid,text,integer,integer) set jit = off;
alter function pgflow.maybe_complete_runs(uuid[]) set jit = off;
alter function pgflow.release_limit_slots(uuid[],boolean) set jit = off;
alter function pgflow.requeue_stalled_tasks() set jit = off;
alter function pgflow.start_flows(text,jsonb,uuid[],integer,integer) set jit = off;
alter function pgflow.start_ready_steps(uuid[]) set jit = off;
alter function pgflow.start_shared_tasks(text,bigint[],uuid,text[],text[]) set jit = off;
alter function pgflow.start_tasks(text,text,bigint[],uuid,text) set jit = off;
