"""The permission side-band: an agent asks the caller for a structured allow/deny decision."""
