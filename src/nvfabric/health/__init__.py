"""GPU fabric health: readers (NVML, nvidia-smi text/XML/CSV), the value model, health-mask
decoding, services' liveness and the pure verdict rules.

Modules: ``model`` (GpuFabric, FabricHealth), ``mask`` (health mask fields), ``nvml`` (ctypes
structs + live reader), ``smi`` (capture parsers), ``live`` (``read(root)``), ``services``
(liveness from the host), ``verdict`` (pure rules). Import the module you need: this package
imports nothing heavy on its own.
"""
