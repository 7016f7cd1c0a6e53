-- Down delta of 0014_schedules: removes the schedules, their ledger and the firing functions.

drop function if exists pgflow.trigger_schedule(text, timestamptz, jsonb);
drop function if exists pgflow.plan_schedules(jsonb);
drop function if exists pgflow.fire_due_schedules(timestamptz, integer, jsonb, interval);
drop function if exists pgflow.due_schedule_names(timestamptz, integer, boolean);
drop function if exists pgflow.schedule_due_ticks(text[], timestamptz, interval);
drop function if exists pgflow.schedule_next_fire_at(text, timestamptz[], integer);
drop function if exists pgflow.schedule_fire_at(text, timestamptz, integer);
drop table if exists pgflow.schedule_ticks;
drop table if exists pgflow.schedules;
