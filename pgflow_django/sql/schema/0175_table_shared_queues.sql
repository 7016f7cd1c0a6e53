-- Queues declared shared by pgflow: explicit names that routed flows select (route_flow), which
-- several steps, flows and versions may use. Only this declaration distinguishes them from queues
-- created outside pgflow; they are never generated names (no '__') and are never dropped with a flow.
create table pgflow.shared_queues (
  queue_name text primary key
    constraint shared_queues_queue_name_check
    check (pgflow.is_valid_queue_name(queue_name) and position('__' in queue_name) = 0),
  declared_at timestamptz not null default clock_timestamp()
);
