"""The composition root and the command-line entry points: the only layer that knows every part."""
