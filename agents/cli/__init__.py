"""CLI coding agents (Claude Code, the Codex CLI, Aider) as the arena runs them inside a
sandbox: their command lines and environments (``agents.cli.commands``)."""
