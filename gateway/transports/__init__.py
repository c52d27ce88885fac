"""JSON-RPC 2.0 over transports of our own: stdio, a unix socket, WebSocket, a gRPC
envelope, Redis Streams.

Each carries the same request documents as `POST /` and runs them through the same
transport-free dispatcher (gateway/jsonrpc.py) and call pipeline; `session.py` holds the
one rule they all follow (service parameters, answers as frames with `final`, event ids,
errors) and each other module is only its transport's framing. docs/transports.md is the
user's description of that rule.
"""
