"""Connection limits and log flood control for the listeners."""
