create table pgflow.deps (
  flow_slug text not null references pgflow.flows (flow_slug),
  dep_slug text not null,
  step_slug text not null,
  created_at timestamptz not null default clock_timestamp(),
  primary key (flow_slug, dep_slug, step_slug),
  foreign key (flow_slug, dep_slug) references pgflow.steps (flow_slug, step_slug),
  foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  check (dep_slug <> step_slug)
);

create index deps_step_idx on pgflow.deps (flow_slug, step_slug);
