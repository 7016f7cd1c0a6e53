-- Frozen down delta of 0045_run_now: back to 0044_flow_versions (no run-now).

drop function pgflow.run_now(uuid);
