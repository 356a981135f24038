"""The exceptions of nvfabric: one hierarchy under :class:`NvfabricError`.

Every expected failure (unreadable input, a blocked plan, a daemon that died) is an
:class:`NvfabricError` carrying its :class:`~nvfabric.model.findings.Finding` and exit code;
the CLI (``cli/render.guarded``) prints it as one line, or one JSON object under ``--json``,
and exits with ``exit_code``. Anything else escaping a command is a bug: ``internal_error``,
exit 3. The whole tree (each class lives beside the code that raises it)::

    NvfabricError                          finding + exit_code (1: the checked thing is bad)
    ├── InputError (also a ValueError)     a value refused; exit 2, input_unreadable
    │   ├── model.strict.BadValue          a number or JSON value of the wrong shape
    │   │   └── model.strict.NotJson       text that is not JSON at all
    │   ├── model.keyvalue.ConfigValueError      a config key/value never written
    │   │                                         (config_invalid_value, ``key``)
    │   ├── facts.smi.SmiFormatError       not a readable nvidia-smi capture
    │   ├── model.hostpath.PathEscape      a host path that would leave the root
    │   ├── rules.logtext.LogInputError    a log doctor refuses to read
    │   │   ├── rules.diagnose.LogValueError     a value no fabric log prints
    │   │   └── rules.logtext.LogEncodingError   not UTF-8/16/32 text
    │   ├── rules.catalogue.CatalogueError a malformed signature row (the shipped
    │   │                                   catalogue is nvfabric's own: internal_error, 3)
    │   ├── rules.imex.nodes.PeerError     a node list entry IMEX would not take
    │   ├── simulate.spec.SpecError        a node spec that cannot be built
    │   ├── bringup.vendor.TypedPathMissing        a path the operator typed is missing
    │   ├── model.fmkeys.ConfigError              a fabric manager override refused
    │   │                                           (its config_invalid_value finding)
    │   ├── model.fmkeys.ShippedConfigError       the shipped fabricmanager.cfg unusable
    │   ├── supervisor.job.JobError        a prepared unit the lean supervisor refuses
    │   └── triage.report.ReportTooLarge   a bug report past the size bounds
    ├── effects.unitfile.UnitError         the systemd unit cannot be installed
    │                                       (unit_not_installed)
    ├── publish.api.PublishError           a Kubernetes API call failed, by kind
    │                                       (kube_publish_failed, ``kind``)
    └── artifacts.transport.NotPublished   the source has no such file: 404/410
                                            (artifact_not_available)

Not in the tree: ``artifacts.transport._Transient``, a private retry signal that never leaves
the transport (a timeout or a 5xx before the next attempt); ``rules.imex.script._OverBudget``,
a private signal that never leaves the Slurm script reader (its expansions' work budget spent:
the rest of the script is said to be unread); ``effects.stop.Stopped``, a stop signal seen
where the command waits (a BaseException, as KeyboardInterrupt: no failure, and no ``except
Exception`` may take it for one).

Why :class:`InputError` is also a ``ValueError``: its classes are raised by pure parsers and
checkers, and their callers (and the fuzz targets of tests/fuzz) catch ``ValueError`` for
"this value is refused" together with the standard library's own refusals (``int()``,
:mod:`ipaddress`, :mod:`json`); the second base keeps every such ``except`` working while the
finding and exit code ride along to the CLI.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FindingCode


class NvfabricError(Exception):
    """An expected failure carrying a finding.

    ``exit_code`` follows the public contract: 1 the checked thing is bad, 2 usage or
    unreadable input. ``str(err)`` is the finding's message.
    """

    def __init__(self, finding: Finding, exit_code: int = 1) -> None:
        super().__init__(finding.message)
        self.finding = finding
        self.exit_code = exit_code


class InputError(NvfabricError, ValueError):
    """A value nvfabric refuses (a capture, a log, a spec, a config value, an option): exit 2.

    Raised with a one-line ``message`` (and optionally a ``hint`` and extra finding
    ``fields``): the finding is an error of the class's :attr:`code`, ``input_unreadable``
    unless a subclass names another. Raised with a :class:`Finding` instead, that finding is
    carried as it is. A caller that knows more (the file the value came from) re-raises with
    its own finding.
    """

    #: The finding code of a message-only error of this class.
    code: ClassVar[FindingCode] = "input_unreadable"
    #: The exit code the CLI gives it (2: the input is bad; 3 where the input is our own data).
    exit_status: ClassVar[int] = 2

    def __init__(self, message: str | Finding, hint: str = "",
                 fields: Mapping[str, Any] | None = None) -> None:
        finding = message if isinstance(message, Finding) else Finding(
            self.code, "error", message, hint, dict(fields or {}))
        super().__init__(finding, exit_code=self.exit_status)


def usage_error(message: str, hint: str) -> NvfabricError:
    """An error about the caller's input (bad file, bad value): exit code 2. ``hint`` is
    required: an error says what to do about it (tests/cli/test_message_slips.py)."""
    return NvfabricError(Finding("input_unreadable", "error", message, hint), exit_code=2)


def os_hint(err: OSError, parent: str, euid: int | None = None) -> str:
    """What to do about an OSError met writing or reading under ``parent``, by its errno:
    a read-only filesystem is named as one (never "run as root"), and "run as root" is said
    only to a process that is not root (``euid``, default this process's): as root a denial
    comes from a security module, a read-only mount or a container's limits."""
    root = (os.geteuid() if euid is None else euid) == 0
    denied = ("nvfabric runs as root already: a security module (SELinux, AppArmor), a "
              "read-only bind mount or the container's limits deny it; pass a path it may "
              "write") if root else ""
    hints = {
        errno.EACCES: denied or "run as root, or pass a path nvfabric may write",
        errno.EPERM: denied or "run as root (or with the capability this needs)",
        errno.EROFS: f"{parent} is on a read-only filesystem: pass a path on a writable one",
        errno.ENOLCK: f"the filesystem of {parent} does not support locks (NFS?): pass a "
                      "local directory",
        errno.ENOTDIR: "a file is where a directory should be: check the path",
        errno.EISDIR: "a directory is where a file should be: check the path",
    }
    return hints.get(err.errno or 0, "check the path given and that it is the right kind "
                     "(file or directory) and writable where nvfabric writes")


def internal_error(err: BaseException) -> Finding:
    """The finding of a bug (exit 3): an exception no command expects."""
    return Finding("internal_error", "error", f"{type(err).__name__}: {err}",
                   "this is a bug in nvfabric: run again with NVFABRIC_DEBUG=1 for the "
                   "traceback and report it")


#: errno values of a full filesystem (ENOSPC, EDQUOT): a fault of the node, exit 1.
_FULL = (errno.ENOSPC, errno.EDQUOT)


def os_error(err: OSError, doing: str = "", path: str | None = None) -> tuple[Finding, int]:
    """What an OSError is, as a finding naming the file and an exit code (docs/commands/index.md):
    a full filesystem is ``disk_full`` (exit 1: the node is the problem, not the command
    line); permissions, a read-only filesystem, locks the filesystem does not support and the
    rest are ``input_unreadable`` (exit 2) with the hint that fits the errno. ``doing``: what
    failed (``cannot take the run lock``); ``path``: the file when ``err`` has none."""
    where = path or err.filename
    what = f"{doing} {where}" if doing and where else (doing or str(where or ""))
    reason = err.strerror or str(err)
    message = f"{what}: {reason}" if what else reason
    parent = os.path.dirname(str(where)) if where else "the filesystem"
    if err.errno in _FULL:
        hint = (f"free space on the filesystem of {parent} (`df -h {parent}`), or pass a "
                "directory on another filesystem") if where else (
                "free space on the filesystem being written (the standard output's, when it is "
                "redirected to a file), or write elsewhere")
        return Finding("disk_full", "error", message, hint, {"path": where}), 1
    return Finding("input_unreadable", "error", message, os_hint(err, parent),
                   {"path": where}), 2
