"""Generated from proto/a2a.proto, proto/a2a_v0_3.proto and proto/jsonrpc_envelope.proto by `make gen`. Do not edit."""
