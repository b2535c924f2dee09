"""Command-line entry points: thin wrappers that parse arguments and call into kmt."""
