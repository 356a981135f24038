"""The commands nvfabric tells the operator to type (a next step, a fix in a hint), built so
that typed as printed they do the same thing as the command that printed them: on the same
root, with the same state directory, from the same download directory.

``--root`` is the one that matters most: without it ``nvfabric install`` after ``fetch --root
IMAGE`` installs into the host's ``/opt/nvfabric``, and ``nvfabric status`` in a container
that runs ``run --root /host`` reads the container. Every printed command line is built here,
shell-quoted (:func:`shlex.join`: an image tree may be ``/srv/img 2``); words written in upper
case (``FILE``, ``DIR``) are placeholders the operator fills in.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

#: The state directory of ``run`` and ``ready`` when ``--state-dir`` is not given.
DEFAULT_STATE_DIR = "/run/nvfabric"


def command_line(*words: str, root: str = "/", state_dir: str | None = None,
                 options: Sequence[tuple[str, str | None]] = (),
                 program: str = "nvfabric") -> str:
    """``nvfabric WORDS [--root ROOT] [--state-dir DIR] [--OPTION VALUE]...`` as one shell
    line: ``--root`` only when ``root`` is not ``/`` (made absolute), ``--state-dir`` only when
    given and not :data:`DEFAULT_STATE_DIR`, each option only when its value is not None (a
    value of ``""`` is a flag without a value). ``program`` may be ``systemctl``, ``dpkg`` or
    ``journalctl``, whose ``--root`` means the same and comes first (``dpkg --root ROOT -s
    PACKAGE``, ``journalctl --root ROOT -k``: the journal files under the root);
    nvfabric's options follow its command words. Pure (``os.path.abspath`` aside)."""
    where = ["--root", os.path.abspath(root)] if os.path.abspath(root) != "/" else []
    if state_dir is not None and state_dir != DEFAULT_STATE_DIR:
        where += ["--state-dir", state_dir]
    for flag, value in options:
        if value is not None:
            where += [flag] if value == "" else [flag, value]
    argv = [program, *words, *where] if program == "nvfabric" else [program, *where, *words]
    return " ".join(w if w.isupper() and w.isalpha() else shlex.quote(w) for w in argv)


#: nvfabric's own systemd unit (nvfabric/data/nvfabric.service).
NVFABRIC_UNIT = "nvfabric.service"
#: The vendor packages' units: fabric manager's (tests/data/corpus/configs/
#: nvidia-fabricmanager-535.service) and the IMEX daemon's (NVIDIA IMEX guide, "Managing the
#: IMEX Service").
FM_UNIT = "nvidia-fabricmanager.service"
IMEX_UNIT = "nvidia-imex.service"

#: The placeholders a catalogue hint (nvfabric/data/signatures.yaml) types commands and host
#: paths with, rendered by :meth:`HintContext.placeholder` for the node a finding is about:
#: name -> what follows its colon (``words``: the command's words, split at spaces; ``path``:
#: an absolute host path; None: nothing). ``{nvfabric:status}``: ``nvfabric status [--root R]``;
#: ``{journalctl:-k}``: ``journalctl [--root R] -k``; ``{path:/dev/x}``: ``/dev/x`` under the
#: root; ``{on_host}``: nothing on the node itself, else `` on the host whose root R is`` (for
#: the commands that act on a running kernel or manager: systemctl, modprobe, nvidia-smi);
#: ``{fm_start}``, ``{imex_start}``, ``{imex_domain}``: :meth:`HintContext.fm_start`,
#: :meth:`HintContext.imex_start`, :meth:`HintContext.imex_domain` (backquoted commands in
#: them).
HINT_PLACEHOLDERS: dict[str, str | None] = {
    "nvfabric": "words", "journalctl": "words", "path": "path", "on_host": None,
    "fm_start": None, "imex_start": None, "imex_domain": None,
}

#: Who runs a fabric daemon on a node, as :class:`HintContext` names it: ``nvfabric`` (a
#: live ``nvfabric run``, its pid file, or nvfabric.service enabled), ``unit`` (the vendor
#: unit), ``none`` (the node was read: nothing runs it); None where it is not known (a bug
#: report, a saved capture).
RUNNERS = ("nvfabric", "unit", "none")


@dataclass(frozen=True)
class HintContext:
    """The node a hint speaks of, as the operator asked about it, so that every command and
    host path a hint types works there as printed.

    ``root``: the ``--root`` given (``/``: the node itself); ``fm_runner``: who runs fabric
    manager (:data:`RUNNERS`, None: not known); ``nvfabric_unit``: nvfabric.service is
    enabled under the root (nvfabric's runs are that unit's); ``fm_log``: fabric manager's
    log file as a host path (its config's ``LOG_FILE_NAME``; ``""``: it logs to stderr, so to
    the journal of whoever runs it); ``imex_owner``/``imex_runner``: the IMEX decision
    (:class:`nvfabric.rules.imex.owner.Ownership`: owner, runner) and ``imex_config`` the
    config its daemon runs with when not the package's (host path: a live run's effective
    one). Pure values; the default
    is the node itself with nothing known."""

    root: str = "/"
    fm_runner: str | None = None
    nvfabric_unit: bool = False
    fm_log: str = "/var/log/fabricmanager.log"
    imex_owner: str | None = None
    imex_runner: str | None = None
    imex_config: str | None = None

    @property
    def host(self) -> bool:
        """The root is the node itself: its systemd can be asked (``systemctl status`` has
        no ``--root``)."""
        return os.path.abspath(self.root) == "/"

    def nvfabric(self, *words: str, options: Sequence[tuple[str, str | None]] = ()) -> str:
        """``nvfabric WORDS`` on this node (:func:`command_line`)."""
        return command_line(*words, root=self.root, options=options)

    def path(self, host_path: str) -> str:
        """``host_path`` as this machine reaches it: joined under the root unless it is the
        node itself, or the path is already under the root (a config written by ``run``
        holds its paths resolved)."""
        base = os.path.abspath(self.root).rstrip("/")
        if not base or host_path == base or host_path.startswith(base + "/"):
            return host_path
        return base + "/" + os.path.normpath(host_path).lstrip("/")

    def on_host(self) -> str:
        """Where a command that acts on the running kernel or service manager is typed:
        ``""`` on the node itself, else `` on the host whose root R is`` (systemctl cannot
        ask a manager through a root, modprobe loads into the running kernel)."""
        return "" if self.host else f" on the host whose root {os.path.abspath(self.root)} is"

    def unit(self, unit: str) -> str:
        """How to look at ``unit`` and its log: ``systemctl status`` and ``journalctl -u``
        of the node itself; under another root, on the host that root belongs to (systemctl
        cannot ask a manager through a root)."""
        return (f"`{shlex.join(['systemctl', 'status', unit])}` and "
                f"`{shlex.join(['journalctl', '-u', unit])}`{self.on_host()}")

    def restart(self, unit: str) -> str:
        """``systemctl restart UNIT``, quoted, with where it is typed."""
        return f"`{shlex.join(['systemctl', 'restart', unit])}`{self.on_host()}"

    def placeholder(self, name: str, spec: str = "") -> str:
        """The text of the hint placeholder ``{name:spec}`` (:data:`HINT_PLACEHOLDERS`) on
        this node. KeyError for a name that is none of them (the catalogue's validation
        refuses such a row: :func:`nvfabric.rules.catalogue.parse_catalogue`)."""
        if name == "nvfabric":
            return self.nvfabric(*spec.split())
        if name == "journalctl":
            return command_line(*spec.split(), root=self.root, program="journalctl")
        if name == "path":  # a directory keeps its slash: "add X to /etc/modules-load.d/"
            path = self.path(spec)
            return path + "/" if spec.endswith("/") and not path.endswith("/") else path
        methods = {"on_host": self.on_host, "fm_start": self.fm_start,
                   "imex_start": self.imex_start, "imex_domain": self.imex_domain}
        return methods[name]()

    def fm_start(self) -> str:
        """What starts fabric manager again, by who runs it (both ways where not known)."""
        if self.fm_runner == "unit":
            return self.restart(FM_UNIT)
        run = f"`{self.nvfabric('run')}`"
        if self.nvfabric_unit:
            return f"{self.restart(NVFABRIC_UNIT)} (it runs {run})"
        if self.fm_runner is None:
            return f"{run}, or {self.restart(FM_UNIT)} where the vendor unit runs it"
        return run

    def fm_status(self) -> str:
        """Where fabric manager's state and start-up lines are, by who runs it."""
        if self.fm_runner == "unit":
            return self.unit(FM_UNIT)
        if self.fm_runner == "nvfabric" and self.nvfabric_unit:
            return f"{self.unit(NVFABRIC_UNIT)} (nvfabric runs fabric manager)"
        if self.fm_runner == "nvfabric":
            return (f"the output of `{self.nvfabric('run')}` (nvfabric runs fabric manager) "
                    f"and `{self.nvfabric('status')}`")
        if self.fm_runner is None:
            return (f"{self.unit(FM_UNIT)} where the vendor unit runs it, the output of "
                    f"`{self.nvfabric('run')}` where nvfabric does")
        return (f"nothing runs fabric manager here (no nvfabric run, neither {NVFABRIC_UNIT} "
                f"nor {FM_UNIT} enabled): start it with `{self.nvfabric('run')}`")

    def fm_doctor(self) -> str:
        """The ``doctor`` line that explains fabric manager's log: its file under the root,
        or (a log on stderr) the journal of the unit that runs it, piped."""
        if self.fm_log:
            return f"`{self.nvfabric('doctor', options=(('--log', self.path(self.fm_log)),))}`"
        unit = NVFABRIC_UNIT if self.fm_runner == "nvfabric" else FM_UNIT
        return (f"`{shlex.join(['journalctl', '-u', unit, '-o', 'cat'])} | "
                f"{self.nvfabric('doctor', options=(('--log', '-'),))}`")

    def imex_start(self) -> str:
        """Who starts the IMEX daemon and how, by its owner and runner (docs/imex.md, "The
        owners"): the unit that runs it, the DRA driver's ComputeDomain pods, the job's Slurm
        prolog, or nvfabric (its unit, or ``run``)."""
        owner, runner = self.imex_owner, self.imex_runner
        if runner == "unit":
            per_job = "; the job's Slurm prolog restarts it per job" if owner == "slurm" else ""
            return (f"{IMEX_UNIT} runs it: {self.restart(IMEX_UNIT)}; {self.unit(IMEX_UNIT)} "
                    f"say why it stopped{per_job}")
        if owner == "dra":
            return ("the DRA driver runs IMEX in each ComputeDomain's daemon pod: "
                    "`kubectl get computedomains -A` and the logs of the IMEX daemon pod on this "
                    "node say why it is not running")
        if owner == "slurm":
            return ("the job's Slurm prolog starts it: slurmd's log of the job's prolog says "
                    "why it did not")
        if owner == "nvfabric" or runner == "nvfabric":
            where = (self.unit(NVFABRIC_UNIT) if self.nvfabric_unit
                     else f"the output of `{self.nvfabric('run')}`")
            return f"nvfabric runs it (`{self.nvfabric('run')}`): {where} say why it stopped"
        if owner == "dra-host":
            run = self.nvfabric("run", options=(("--imex-owner", "dra-host"),))
            return (f"the DRA driver's host-managed mode needs a host daemon: `{run}` runs it "
                    f"(or enable {IMEX_UNIT})")
        return (f"`{self.nvfabric('run')}` becomes its owner and runs it, or let the DRA "
                "driver or Slurm run it")

    def imex_domain(self) -> str:
        """``nvfabric imex domain`` asking the daemon that runs, with its config."""
        options = (("--config", self.imex_config),)
        return f"`{self.nvfabric('imex', 'domain', options=options)}`"


#: The node itself with nothing known: the hint context of rules asked without one (a bug
#: report's plan, a saved capture).
THE_NODE = HintContext()
