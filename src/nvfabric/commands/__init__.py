"""One module per ``nvfabric`` subcommand; each is thin: options, call the core, print."""
