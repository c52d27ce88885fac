"""The HTTP listener's limits, in one place: connections (`connections.py`: the cap, the
header and body deadlines and size, enforced in accept() and uvicorn's httptools protocol) and the
back-pressure after a refusal (`backoff.py`: a connection answered 429 is not read again
until its hint has passed). The per-caller limits (rate, turns, streams) are the engine's
(service/engine/limits.py); the numbers both listeners share, and gRPC's own, are
service/net/limits.py's."""
