"""Generated from proto/a2a.proto and proto/a2a_v0_3.proto by `make gen`. Do not edit."""
