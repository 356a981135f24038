"""The cluster's view: nvfabric's verdict told to Kubernetes as node conditions, events,
labels and an opt-in taint (``run --publish``, ``status --publish``), and the door for
node-problem-detector (``status --npd``).

- :mod:`nvfabric.publish.api`: the five API calls (lightkube), their errors by kind.
- :mod:`nvfabric.publish.node`: one Node's publisher: the fewest writes that make it say a view.
- :mod:`nvfabric.publish.beside`: the thread beside the supervisor (back-off, newest state
  wins, the tally for ``/metrics`` and ``/status``) and the one-shot.
- :mod:`nvfabric.publish.view`: the view of a ``status --json`` object and the run's unit.

What is said is decided by the pure rules of :mod:`nvfabric.rules.cluster`.
"""
