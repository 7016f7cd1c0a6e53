"""Runs on Django's own connection, inside the caller's transaction: start, observe, cancel and retry
(``client``), recover, prune, pause and delete (``operations``), which steps no live worker serves
(``coverage``), the JSON and text rules of what the engine stores (``encoding``,
``recorded_errors``) and callable limit keys (``run_keys``)."""
