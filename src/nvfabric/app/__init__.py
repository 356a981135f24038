"""One procedure per command: read once, decide with pure functions, act, return a result
value that the command module of :mod:`nvfabric.cli` renders (../shared/DESIGN.md "The CLI
renders; procedures live in app/")."""
