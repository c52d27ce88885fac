"""The A2A service: servicer, task engine, stores, agents and the `python -m service` CLI."""
