"""Generated from proto/a2a.proto by `make gen`. Do not edit."""
