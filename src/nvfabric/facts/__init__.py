"""The only reader of the host: what nvfabric knows about a node, read under a root directory."""
