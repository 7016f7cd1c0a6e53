-- The planner settings of the start, claim and completion path and of stalled recovery, stated once
-- for every PL/pgSQL function that runs it (the SQL-language claim wrapper of the previous release
-- keeps the defaults: a SQL function plans its statement on every call anyway). Each statement of
-- these functions reaches its rows by key from its batch, so:
-- * plan_cache_mode = force_generic_plan: a statement is planned once per session, not on each of
--   the first five calls and then whenever a custom plan looks cheaper;
-- * enable_seqscan, enable_mergejoin, enable_hashjoin = off: the plan made on empty tables is the
--   nested loop of index probes a million rows want, so a long-lived worker keeps a good plan;
-- * jit = off: a generic plan prices every partition of a partitioned history, and statements that
--   read no row came to cost more than jit_above_cost and were compiled on every execution.
-- The statements they call (PGMQ's among them) inherit the settings. `create or replace function`
-- resets a function's settings, so this file runs after every function's own.
do $$
declare
  v_function regprocedure;
begin
  for v_function in
    select p.oid::regprocedure
      from pg_proc as p
      join pg_language as l on l.oid = p.prolang
     where p.pronamespace = 'pgflow'::regnamespace
       and l.lanname = 'plpgsql'
       and p.proname = any (array[
             'archive_task_messages', 'cascade', 'claim_classified', 'classify_claim',
             'complete_and_hand_off', 'complete_tasks', 'fail_task', 'hand_off_tasks', 'limit_claim',
             'lock_claimed_task', 'maybe_complete_runs', 'release_limit_slots', 'requeue_stalled_tasks',
             'send_event', 'start_flows', 'start_ready_steps', 'start_shared_tasks', 'start_tasks',
             'start_waits', 'task_details', 'task_transitions', 'wake_waits', 'start_child_runs',
             'delete_expired_events', 'end_waits', 'fail_child_run'])
     order by 1
  loop
    execute format(
      'alter function %s set plan_cache_mode = force_generic_plan set enable_seqscan = off'
      ' set enable_mergejoin = off set enable_hashjoin = off set jit = off',
      v_function);
  end loop;
end
$$;
