"""A command-line client for an Agent Arena, talking only to its REST API (/api/) with a
bearer token. The console script is ``arena`` (arena_client.cli)."""

__version__ = "0.1.0"
