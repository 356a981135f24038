"""What a multi-node NVLink compute tray (GB200/GB300) shows for IMEX: :mod:`.tray` (who owns
the daemon, the channels, the config and node list files, the node's addresses and names, the
host unit), :mod:`.ctl` (``nvidia-imex-ctl``: the call under a hard timeout and its output)
and :mod:`.ready` (the supervisor's readiness probe of the daemon). The decisions over these
facts are :mod:`nvfabric.rules.imex`; the changes nvfabric makes are
:mod:`nvfabric.effects.imex`.
"""
