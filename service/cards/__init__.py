"""Agent cards and their signatures."""
