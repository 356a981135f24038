"""IMEX on multi-node NVLink compute trays (GB200/GB300 NVL72): who owns the daemon, the IMEX
channels, the configuration and node list, the daemon's own view of its domain, and the fleet
check across many nodes' status reports.

Pure modules (values in, values out): :mod:`.owner`, :mod:`.channels`, :mod:`.nodes`,
:mod:`.config`, :mod:`.ctl`, :mod:`.domain`; facts with their sources in :mod:`.facts`. The
only module that touches the host is :mod:`.host`.
"""
