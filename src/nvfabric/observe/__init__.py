"""Watching the fabric from outside: Prometheus metrics (:mod:`.metrics`), the unit-state
snapshot they are built from (:mod:`.unitstate`), the HTTP probes of ``run --listen``
(:mod:`.serve`) and the log formatters (:mod:`.logs`).

Nothing here decides anything about the fabric: the values come from the status report
(:mod:`nvfabric.cli.status`) and the supervisor; this package only renders and serves them.
"""
