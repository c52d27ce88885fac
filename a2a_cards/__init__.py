"""Agent card signatures, shared by the server (`service.cards`) and the `a2a-call` client.

JWS keys (`keys.py`), signing and verifying a card's JSON (`jws.py`), reading cards and key
sets over HTTP or from files with bounded size, time and redirects (`fetch.py`), and the key
policy of a verifier (`finder.py`). It imports nothing of `service`, `gateway` or `a2a_call`
(an import contract in pyproject.toml), so the client needs none of the server.
"""
