"""A2A protocol rules with no I/O: errors, ids, states, time, request validation, admission."""
