"""The only writers: atomic files, config patching, device nodes, unit files."""
