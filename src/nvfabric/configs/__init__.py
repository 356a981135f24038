"""The only writer of config files: fabricmanager.cfg, nvlsm.conf, IMEX config.cfg and
nodes_config.cfg. Parse, patch keeping comments and key order, render, write atomically."""
