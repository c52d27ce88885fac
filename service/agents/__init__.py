"""Built-in agents: `echo` (the default) and `command`."""
