"""Where rows come from besides `append` and the events API: connections (`.connection` files), their secrets, and
the connectors of the one runtime (pipeframe/runtime.py) that consume them — Kafka today (`kafka.py`)."""
