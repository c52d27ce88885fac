"""The `a2a-call` command-line client: a client of any A2A 1.0 agent, not part of the server.

It talks to agents through the a2a-sdk client (the optional `client` extra) and verifies
signed cards with `a2a_cards`; it imports nothing of `service` or `gateway` (an import
contract in pyproject.toml).
"""
