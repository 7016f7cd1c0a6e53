"""What a flow is, before any database: the DSL (``dsl``), slugs and queue names (``slugs``), flow
control (``flow_control``), the handler's context (``context``), the project's flows (``registry``),
Django task flows by function path (``task_names``) and compiling them (``compiler``)."""
