"""From a plan to what must run: service specs, argv, files and checks, one per fabric kind."""
