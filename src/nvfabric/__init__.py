"""nvfabric: bring up the NVLink fabric of an NVIDIA GPU node and say whether it is usable.

The package is a functional core (inventory snapshot -> plan, health -> verdict, logs ->
findings) inside a thin imperative shell (``inventory`` reads the host, ``configs`` writes
files, ``supervisor`` spawns daemons, ``artifacts`` talks to the network).
"""

__version__ = "0.1.0"
