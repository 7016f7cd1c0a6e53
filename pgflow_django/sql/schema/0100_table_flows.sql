create table pgflow.flows (
  flow_slug text primary key constraint flows_flow_slug_check check (pgflow.is_valid_flow_slug(flow_slug)),
  opt_max_attempts integer not null default 3 check (opt_max_attempts >= 1),
  opt_base_delay integer not null default 1 check (opt_base_delay >= 0),
  opt_timeout integer not null default 60 check (opt_timeout >= 1),
  created_at timestamptz not null default clock_timestamp(),
  -- 'flow': every step on the default queue lower(flow_slug); 'step': each step on its own private
  -- generated queue (pgflow.step_queue_name); 'routed': each step on a declared shared queue
  -- (pgflow.shared_queues). Part of a concrete flow's identity, like its shape.
  queue_mode text not null default 'flow' constraint flows_queue_mode_check check (queue_mode in ('flow', 'step', 'routed')),
  -- a fresh number each time the flow is compiled (a replaced flow gets a new one): a worker keeps
  -- the generation it compiled against and its claim reads nothing once the row holds another
  generation bigint not null generated always as identity,
  -- the priority of a run started without one (a step's own opt_priority comes first)
  opt_priority smallint not null default 0 check (opt_priority between -100 and 100),
  -- the flow a version belongs to and its number (pgflow.version_of): derived from the stored slug
  version_of text not null generated always as (pgflow.version_of(flow_slug)) stored,
  version_number integer not null
    generated always as (coalesce(substring(flow_slug from '___v([0-9]+)$')::integer, 1)) stored,
  -- what identifies this version to the code that defines it: the name Flow(..., version=) gives, or
  -- 'shape:' and a digest of the definition; null until a compile claims the row (flows compiled
  -- before versions existed, and flows created through pgflow.create_flow)
  version text constraint flows_version_check
    check (length(version) between 1 and 80 and version !~ '[[:cntrl:]]')
);

-- PGMQ lowercases table names: flows differing only in case would share a queue.
create unique index flows_slug_lower_key on pgflow.flows (lower(flow_slug));
create unique index flows_version_key on pgflow.flows (version_of, version) where version is not null;
create index flows_version_of_idx on pgflow.flows (version_of, version_number);
