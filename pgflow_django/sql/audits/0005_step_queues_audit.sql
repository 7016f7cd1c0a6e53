-- Audit checks of 0003_queue_identity_audit.sql redefined for databases migrated to 0005_step_queues
-- or later (pgflow_django.upgrade uses them once pgflow.flows has queue_mode): same names, same
-- result columns. Only plain flows have a default queue; step-queued and routed flows own none.

-- check: flows_without_default_queue
-- Plain flows that do not have exactly one PGMQ queue whose name is lower(flow_slug) in any case,
-- with its queue and archive tables.
with flow_queues as (
  select f.flow_slug,
         array_agg(m.queue_name::text order by m.queue_name) filter (where m.queue_name is not null) as spellings
    from pgflow.flows as f
    left join pgmq.meta as m on lower(m.queue_name) = lower(f.flow_slug)
   where f.queue_mode = 'flow'
   group by f.flow_slug
), found as (
  select fq.flow_slug,
         case
           when fq.spellings is null then format('no PGMQ queue named %s', lower(fq.flow_slug))
           when cardinality(fq.spellings) > 1 then format('ambiguous queue: %s', array_to_string(fq.spellings, ', '))
           when to_regclass(format('pgmq.%I', 'q_' || lower(fq.flow_slug))) is null
             or to_regclass(format('pgmq.%I', 'a_' || lower(fq.flow_slug))) is null
             then format('queue %s lacks its queue or archive table', fq.spellings[1])
         end as problem
    from flow_queues as fq
)
select 'flows_without_default_queue' as check,
       (select count(*) from found where problem is not null) as problem_count,
       coalesce((select jsonb_agg(jsonb_build_object('flow_slug', s.flow_slug, 'problem', s.problem)
                                  order by s.flow_slug)
                   from (select * from found where problem is not null order by flow_slug limit 5) as s),
                '[]'::jsonb) as samples,
       format('give the flow one queue: recompile it (its worker or manage.py pgflow_compile) to create a '
              'missing one; remove an alias as case_alias_queues says; or delete an unused flow with '
              'manage.py pgflow_delete_flow %s',
              coalesce((select f.flow_slug from found as f where f.problem is not null order by f.flow_slug limit 1),
                       '<flow>')) as hint;
