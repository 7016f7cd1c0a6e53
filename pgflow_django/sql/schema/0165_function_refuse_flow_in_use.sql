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
