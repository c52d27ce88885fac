"""What a message may carry and point at: limits, media types, file:// parts, working directories."""
