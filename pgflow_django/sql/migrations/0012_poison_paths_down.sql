-- Frozen migration delta 0012_poison_paths, backward.

drop function if exists pgflow.reject_task(uuid, text, integer, integer, text);
