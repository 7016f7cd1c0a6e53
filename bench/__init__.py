"""``make bench``: raw PGMQ limit versus this engine's throughput, latency and memory, from one run."""
