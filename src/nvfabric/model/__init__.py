"""The vocabulary of nvfabric: value types, findings and their codes, errors."""
