-- Frozen migration delta 0039_row_writes (loaded by pgflow_django/migrations/0039_row_writes.py):
-- fewer row writes per task. runs, step_states and step_tasks lose their foreign keys to flows and
-- steps (each check locked the flow's one row FOR KEY SHARE on every start and new task); a trigger
-- on flows and steps refuses to delete or rename a flow or step that runs still name, as the keys
-- did. pgflow.runs gets fillfactor 50, so that a run's updates find room for a HOT update on its page.

-- 0140_table_runs.sql, 0150_table_step_states.sql, 0160_table_step_tasks.sql: the keys, on a
-- partitioned history too (its partitions' keys are the parent's and go with it)
do $$
declare
  v_row record;
begin
  for v_row in
    select con.conrelid::regclass as rel, con.conname
      from pg_constraint as con
     where con.contype = 'f' and con.conparentid = 0
       and con.confrelid in ('pgflow.flows'::regclass, 'pgflow.steps'::regclass)
       and con.conrelid in (select c.oid from pg_class as c
                             where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                             'pgflow.step_tasks'::regclass)
                            union all
                            select i.inhrelid from pg_inherits as i
                             where i.inhparent in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                   'pgflow.step_tasks'::regclass))
     order by 1, 2
  loop
    execute format('alter table %s drop constraint %I', v_row.rel, v_row.conname);
  end loop;
end
$$;

-- 0140_table_runs.sql: on a partitioned history, its partitions hold the rows (a new partition
-- copies the default partition's options)
do $$
declare
  v_rel regclass;
begin
  for v_rel in
    select c.oid::regclass from pg_class as c where c.oid = 'pgflow.runs'::regclass and c.relkind = 'r'
    union all
    select i.inhrelid::regclass from pg_inherits as i where i.inhparent = 'pgflow.runs'::regclass
  loop
    execute format('alter table %s set (fillfactor = 50)', v_rel);
  end loop;
end
$$;

-- 0165_function_refuse_flow_in_use.sql
-- runs, step_states and step_tasks name their flow and step without foreign keys: each key's check
-- locked the flow's one row (or a step's) FOR KEY SHARE on every start and every new task, a
-- row-lock WAL record and, with concurrent writers, a multixact on a row they all share. The
-- functions that insert those rows read the flow and its steps first, under the flow's start lock
-- (or a run of the flow locked), which pgflow.delete_flow_and_data takes exclusively (and all the
-- runs); this trigger keeps what the keys' NO ACTION gave to any other statement: a flow or step
-- that runs still name is neither deleted nor renamed. Every run has a state for each step of its
-- flow, so a probe of the flow's runs answers for its steps too.
create or replace function pgflow.refuse_flow_in_use()
returns trigger
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_what text := 'the flow row';
begin
  if tg_table_name = 'steps' then
    v_what := format('step %s', old.step_slug);
    if tg_op = 'UPDATE' and old.flow_slug = new.flow_slug and old.step_slug = new.step_slug then
      return new;
    end if;
  elsif tg_op = 'UPDATE' and old.flow_slug = new.flow_slug then
    return new;
  end if;
  if exists (select 1 from pgflow.runs as r where r.flow_slug = old.flow_slug) then
    raise exception 'cannot % % of flow %: it has runs (pgflow.delete_flow_and_data deletes a flow with its data)',
      lower(tg_op), v_what, quote_literal(old.flow_slug)
      using errcode = '23503';
  end if;
  if tg_op = 'DELETE' then
    return old;
  end if;
  return new;
end;
$$;

create trigger refuse_flow_in_use before delete or update of flow_slug on pgflow.flows
  for each row execute function pgflow.refuse_flow_in_use();
create trigger refuse_flow_in_use before delete or update of flow_slug, step_slug on pgflow.steps
  for each row execute function pgflow.refuse_flow_in_use();
