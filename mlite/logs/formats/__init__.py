"""One module per log format: its line grammar, its sniff and its registry entry."""
