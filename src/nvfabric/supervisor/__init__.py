"""The supervisor: runs the services of a unit (NVLSM then fabric manager, or any list of
:class:`~nvfabric.bringup.spec.ServiceSpec`) as one: the only place nvfabric spawns daemons.

Behaviour (tests/data/cases/RUN.md):

- Start in order; each service starts once the one before it is ready. NVLSM's IPC socket is
  waited for with inotify on its directory (ctypes; a 10 ms stat loop where inotify is not
  available), bounded by ``socket_timeout_s`` (R01). Fabric manager is ready once every GPU's
  fabric state is completed, read by a probe in a worker thread so that a slow ``nvidia-smi``
  never delays the reaction to a dying daemon.
- One unit: when a service exits, the others are stopped in reverse start order (SIGTERM to
  its process group, SIGKILL after ``grace_s``) and the outcome names the service, its exit
  status, its last lines and their diagnosis (R02, R03). ``restart="on-failure"`` restarts the
  unit in-process after 1, 2, 4 ... s (capped), except when a service that needs a GPU reset
  (R04) would be restarted after GPUs registered: then the operator's reset command runs
  first, or, without one, the outcome is a ``restart_needs_gpu_reset`` finding.
- SIGTERM/SIGINT: orderly stop in reverse order, exit 0; a second signal kills at once (R05),
  except within ``REPEATED_STOP_WINDOW_S`` of the first: that is the same stop request
  delivered twice (a runtime's kill-all plus the one-file bootloader's forwarding).
  As PID 1 every exited child is reaped, orphans included.
- Child output (stdout and stderr, merged) is forwarded line by line with the service name as
  prefix and fed to a classifier, so that a known failure line yields its finding at once.
- Ready: ``READY=1`` on ``$NOTIFY_SOCKET`` (systemd Type=notify), a readiness file, a log line
  with the time it took. Directories are created 0700 and never widened (R06).
- systemd: ``STATUS=`` says what the unit waits for (NVLSM's socket, GPU registration n/m,
  ready, stopping, restart delay); with ``$WATCHDOG_USEC`` set for this process
  (sd_watchdog_enabled(3)) a timer of the loop sends ``WATCHDOG=1`` every half interval, so a
  loop that stops turning stops the pings and systemd's ``WatchdogSec=`` kills the unit.

Processes are started by :mod:`nvfabric.effects.process` (argv only, stdin /dev/null, own
process group, signal dispositions reset, parent death signal); nothing here runs a shell.

The parts: ``policy`` (values), ``timers`` (injected clock), ``restart`` (back-off, start
limit, R04/R09 as functions), ``machine`` (the unit state machine, one class, acting through a
``host``), ``loop`` (epoll, signals, inotify, the probe thread: the real host),
``supervise`` (:class:`Supervisor`), ``outcome`` (:class:`Outcome`, the ``run --json`` shape),
``lean`` (the lean entry point ``nvfabric run`` execs into). Each name is imported from the
module that defines it.
"""
