"""Fake fabric daemons and tools for simulated nodes: ``nvlsm``, ``nv-fabricmanager``,
``nvidia-smi``, ``nvidia-imex``, ``nvidia-imex-ctl``.

This package is copied verbatim into ``DIR/bin/_nvfabric_fakes/`` by
:func:`nvfabric.simulate.fakes.install`; small launchers next to it call :func:`main`. It
imports only the standard library (and its own modules, relatively), so a simulated tree keeps
working without nvfabric. One module per fake: :mod:`.nvlsm`, :mod:`.fabricmanager`,
:mod:`.smi`, :mod:`.imexd`, :mod:`.imexctl`; what they share is in :mod:`.state` (the node's
state files) and :mod:`.daemon` (printing, options, the daemon's life).

Every fake finds its node root from its own location (``DIR/bin/<fake>`` -> ``DIR``) and keeps
the simulated state under ``DIR/var/lib/nvfabric-sim/``:

- ``node.json``: driver version, fabric kind, versions of the daemons, IMEX local addresses;
- ``gpus.json``: per GPU pci, uuid, name, state (not_supported, not_started, in_progress,
  completed), status, clique id, ClusterUUID, health summary (written by the fake fabric
  manager, read by the fake nvidia-smi);
- ``faults.json``: injected faults per program (also ``$NVFABRIC_FAKE_FAULTS``, same JSON,
  merged over the file): ``crash_after_s``, ``crash_on_sigusr1`` (crash when the test sends
  SIGUSR1: at an event it chose, not after a time a loaded machine may overrun),
  ``exit_code``, ``ignore_sigterm``, ``stop_delay_s`` for any daemon; nvlsm ``socket_delay_s``,
  ``no_socket``; fabricmanager ``version``, ``register_delay_s``, ``stuck``; imex ``peers``
  (``up``/``down``), ``local_ips``;
  imex-ctl and nvidia-smi ``hang``; imex-ctl ``ready_delay_s`` (``-q`` says NOT READY for that
  long after the daemon came up while ``-N`` already shows the domain UP: the lag between the
  local daemon's answer and the peers' view);
- ``calls.jsonl``: one JSON line per event (exec, socket created, registered), with the wall
  time, for tests and benchmarks.

Output lines follow the real ones where a capture exists (tests/data/corpus/logs: the
NV_WARN_NOTHING_TO_DO line, the version mismatch line, "Connected to 1 node.", the success
line, the OpenSM banner, the umad_init ibwarn line; tests/data/corpus/imex: IMEX start-up and
the "No matching network interface" error; tests/data/corpus/nvidia-smi for the -q text, the
-q -x XML and the CSV query). Lines for which no capture exists are marked ``[fake]``.
"""

from __future__ import annotations

import sys

from . import state
from .daemon import say

#: program -> (module of this package, its entry function ``f(argv) -> exit status``). Only the
#: module of the program run is imported (its start-up is what a simulated node's starter
#: waits for; each module imports what its program needs): the one place the fakes load a
#: module by name.
PROGRAMS: dict[str, tuple[str, str]] = {
    "nvlsm": ("nvlsm", "nvlsm"),
    "nv-fabricmanager": ("fabricmanager", "fabricmanager"),
    "nvidia-smi": ("smi", "nvidia_smi"),
    "nvidia-imex": ("imexd", "nvidia_imex"),
    "nvidia-imex-ctl": ("imexctl", "nvidia_imex_ctl"),
}


def main(prog: str, argv: list[str], root: str | None = None) -> int:
    """Entry point of the launchers: run fake ``prog`` with ``argv`` (without argv[0]);
    ``root`` is the simulated root when the launcher knows it (else found from this package's
    place in ``DIR/bin``, :func:`.state.node_root`). Imports only ``prog``'s module."""
    if root is not None:
        state.ROOT = root
    if prog not in PROGRAMS:
        say(f"[fake] unknown simulated program {prog!r}; known: {', '.join(PROGRAMS)}", sys.stderr)
        return 2
    module, function = PROGRAMS[prog]
    try:
        __import__(f"{__name__}.{module}")  # the builtin: importlib is not loaded here
        code: int = getattr(sys.modules[f"{__name__}.{module}"], function)(argv)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
