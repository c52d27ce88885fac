"""The task engine: the registry of runs, the run of one task, the event bus, event streams."""
