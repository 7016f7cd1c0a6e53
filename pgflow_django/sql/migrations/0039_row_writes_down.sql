-- Frozen down delta of 0039_row_writes: back to 0007_squashed_0038. The foreign keys come back
-- (checked against the rows present) and pgflow.runs gets the default fillfactor again.

drop trigger refuse_flow_in_use on pgflow.steps;
drop trigger refuse_flow_in_use on pgflow.flows;
drop function pgflow.refuse_flow_in_use();

do $$
declare
  v_rel regclass;
begin
  for v_rel in
    select c.oid::regclass from pg_class as c where c.oid = 'pgflow.runs'::regclass and c.relkind = 'r'
    union all
    select i.inhrelid::regclass from pg_inherits as i where i.inhparent = 'pgflow.runs'::regclass
  loop
    execute format('alter table %s reset (fillfactor)', v_rel);
  end loop;
end
$$;

alter table pgflow.runs add constraint runs_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug);
alter table pgflow.step_states add constraint step_states_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug);
alter table pgflow.step_states add constraint step_states_flow_slug_step_slug_fkey
  foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug);
alter table pgflow.step_tasks add constraint step_tasks_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug);
