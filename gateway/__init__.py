"""The HTTP gateway: JSON-RPC, REST (from the proto's HTTP rules), the agent card, health.

No business logic: every A2A operation goes through an invoker to the same
servicer the gRPC binding uses (in-process, or a remote one in proxy mode).
"""
