"""What the server and the `a2a-call` client agree on beyond the protocol: where this
service puts its own values in the protocol's messages (the `a2a_service` metadata
namespace, a gRPC stream event's number). Read and written in one place so the two cannot
drift; like `a2a_cards`, it imports nothing of `service`, `gateway` or `a2a_call` (an
import contract in pyproject.toml).
"""
