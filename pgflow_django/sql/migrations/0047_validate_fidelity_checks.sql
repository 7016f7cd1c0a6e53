-- Frozen migration delta 0047_validate_fidelity_checks (loaded by
-- pgflow_django/migrations/0047_validate_fidelity_checks.py): validates the CHECK constraints 0046 added
-- NOT VALID, in a transaction of its own: VALIDATE reads each table under a lock that lets workers
-- write meanwhile. A table whose stored rows break a constraint keeps it NOT VALID (new writes are
-- still checked) and the migration warns with the query that finds the rows.

do $$
declare
  v_check record;
begin
  for v_check in
    select c.conrelid::regclass as tbl, c.conname, pg_get_constraintdef(c.oid) as def
      from pg_constraint as c
     where c.conrelid in ('pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass)
       and c.conname in ('status_and_remaining_tasks_match', 'remaining_tasks_state_consistency',
                         'initial_tasks_known_when_started', 'output_only_for_completed_or_null',
                         'skip_reason_matches_status', 'completed_at_or_failed_at_or_skipped_at',
                         'output_valid_only_for_completed', 'completed_at_or_failed_at')
     order by c.conrelid::regclass::text, c.conname
  loop
    begin
      execute format('alter table %s validate constraint %I', v_check.tbl, v_check.conname);
    exception when check_violation then
      raise warning 'pgflow: rows of % break the new constraint %, which stays NOT VALID (new writes are checked)',
                    v_check.tbl, v_check.conname
        using hint = format('find them with: select * from %s where not (%s); fix or delete them, then run:'
                            ' alter table %s validate constraint %I (partitioning the history needs it)',
                            v_check.tbl, regexp_replace(v_check.def, '^CHECK \((.*)\)( NOT VALID)?$', '\1'),
                            v_check.tbl, v_check.conname);
    end;
  end loop;
end;
$$;
