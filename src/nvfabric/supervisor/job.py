"""The prepared unit as one value: what ``nvfabric run`` hands the supervisor after its plan and
preflight (:class:`Job`), with its JSON form (:meth:`Job.to_json`, :func:`job_from_json`,
validated) so that it can cross an ``execv`` into the lean supervisor process
(:mod:`nvfabric.supervisor.lean`).

Behaviour is not data: the live diagnosis, the readiness probes and the restart checks are
named by value (``fabric`` for the classifier, ``probe_root`` for the GPU probe of that root,
``imex_probe`` for IMEX's ``nvidia-imex-ctl -q``, ``fm_check`` for fabric manager's version
against the driver's) and built where the job runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from nvfabric.bringup.spec import ReadyProbe, ServiceSpec
from nvfabric.model.commandline import RUNNERS, HintContext
from nvfabric.model.errors import InputError
from nvfabric.model.vocab import FabricKind, is_fabric_kind
from nvfabric.supervisor.policy import Policy

#: The version of the JSON form; a job of another version is refused.
JOB_VERSION = 1


class JobError(InputError):
    """A job whose JSON form is not one :meth:`Job.to_json` writes (the message says where)."""


@dataclass(frozen=True)
class Report:
    """How the run's end is reported: ``as_json`` (``--json``: one object on stdout, else the
    closing log line), ``result``: the ``run --json`` object without its outcome keys (result,
    exit_code, ready_after_s, restarts and findings are filled in at the end,
    :func:`nvfabric.supervisor.outcome.run_result`), ``findings``: the JSON of the preflight's
    findings, listed after the outcome's."""

    as_json: bool = False
    result: dict[str, Any] = field(default_factory=dict)
    findings: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Job:
    """One unit to supervise (see the module docstring). ``lock_fd``/``state_dir``: the run
    lock this process holds (kept across the exec), None when there is none."""

    specs: tuple[ServiceSpec, ...]
    policy: Policy
    report: Report
    ready_file: str | None = None
    ready_info: dict[str, Any] = field(default_factory=dict)
    pid_dir: str | None = None
    fabric: FabricKind | None = None
    probe_root: str | None = None
    #: (the readiness query's argv, as ``--dry-run`` prints it; nvidia-imex-ctl and the config
    #: it asks the domain state with; seconds of each call): IMEX's readiness probe
    imex_probe: tuple[tuple[str, ...], str, str, float] | None = None
    fm_check: tuple[str, str | None] | None = None  # (fabric manager binary, driver version)
    state_dir: str | None = None
    lock_fd: int | None = None
    log_format: str = "text"  # run --log-format: text or json
    #: the kernel log watch (nvfabric.supervisor.kernelwatch): root, use (auto, kmsg, journal),
    #: boot_window_s, interval_s, max_lines_per_s; None: not watched
    kernel_watch: dict[str, Any] | None = None
    #: the node the hints of the run's findings type commands for (its root; nvfabric runs
    #: the daemons): the kernel watch's and the services' diagnosis, a service's exit
    hints: HintContext = field(default_factory=HintContext)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (a dict of JSON values)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["version"] = JOB_VERSION
        out["specs"] = [_spec_json(s) for s in self.specs]
        out["policy"] = asdict(self.policy)
        out["report"] = asdict(self.report)
        out["hints"] = asdict(self.hints)
        back: dict[str, Any] = json.loads(json.dumps(out))  # tuples as lists, as read back
        return back


def _spec_json(spec: ServiceSpec) -> dict[str, Any]:
    out = asdict(spec)
    out["ready_probe"] = asdict(spec.ready_probe)
    return out


def _tuple(value: Any, where: str, kind: type = str) -> tuple[Any, ...]:
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise JobError(f"{where}: a list of {kind.__name__}")
    return tuple(value)


def _spec(raw: Any, n: int) -> ServiceSpec:
    if not isinstance(raw, Mapping):
        raw = {}
    known = {f.name for f in fields(ServiceSpec)}
    if set(raw) != known:
        raise JobError(f"specs[{n}]: keys {sorted(raw)} are not those of a service")
    values = dict(raw)
    values["argv"] = _tuple(raw["argv"], f"specs[{n}].argv")
    values["runtime_dirs"] = _tuple(raw["runtime_dirs"], f"specs[{n}].runtime_dirs")
    pairs = raw["env"]
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in pairs):
        raise JobError(f"specs[{n}].env: a list of [name, value]")
    values["env"] = tuple((k, v) for k, v in pairs)
    probe = raw["ready_probe"]
    if not isinstance(probe, Mapping) or set(probe) != {f.name for f in fields(ReadyProbe)} \
            or not all(isinstance(v, str) for v in probe.values()):
        raise JobError(f"specs[{n}].ready_probe: not a readiness probe")
    values["ready_probe"] = ReadyProbe(**probe)
    try:
        return ServiceSpec(**values)
    except (TypeError, ValueError) as err:
        raise JobError(f"specs[{n}]: {err}") from None


def _typed(raw: Mapping[str, Any], name: str, kinds: tuple[type, ...]) -> Any:
    value = raw.get(name)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        raise JobError(f"{name}: not a {' or '.join(k.__name__ for k in kinds)}")
    return value


def job_from_json(raw: Any) -> Job:
    """The job of a JSON form written by :meth:`Job.to_json`. Raises JobError (a wrong
    version, a missing or mistyped key, a service spec ServiceSpec refuses)."""
    if not isinstance(raw, Mapping) or raw.get("version") != JOB_VERSION:
        raise JobError(f"not a job of version {JOB_VERSION}")
    specs = raw.get("specs")
    if not isinstance(specs, list) or not specs:
        raise JobError("specs: a non-empty list")
    policy_raw = _typed(raw, "policy", (dict,))
    try:
        policy_raw = {**policy_raw, "gpu_reset_argv": None if policy_raw.get(
            "gpu_reset_argv") is None else _tuple(policy_raw["gpu_reset_argv"],
                                                  "policy.gpu_reset_argv")}
        policy = Policy(**policy_raw)
    except (TypeError, ValueError) as err:
        raise JobError(f"policy: {err}") from None
    report_raw = _typed(raw, "report", (dict,))
    report = Report(bool(report_raw.get("as_json")), dict(report_raw.get("result") or {}),
                    _tuple(report_raw.get("findings") or [], "report.findings", dict))
    fm_check = raw.get("fm_check")
    if fm_check is not None:
        if not (isinstance(fm_check, list) and len(fm_check) == 2 and isinstance(fm_check[0], str)
                and isinstance(fm_check[1], str | None)):
            raise JobError("fm_check: [binary, driver version]")
        fm_check = (fm_check[0], fm_check[1])
    imex_probe = raw.get("imex_probe")
    if imex_probe is not None:
        if not (isinstance(imex_probe, list) and len(imex_probe) == 4
                and isinstance(imex_probe[0], list) and imex_probe[0]
                and all(isinstance(v, str) for v in imex_probe[0])
                and all(isinstance(v, str) for v in imex_probe[1:3])
                and isinstance(imex_probe[3], (int, float))
                and not isinstance(imex_probe[3], bool)):
            raise JobError("imex_probe: [[query argv], nvidia-imex-ctl, config, timeout]")
        imex_probe = (tuple(imex_probe[0]), imex_probe[1], imex_probe[2], float(imex_probe[3]))
    fabric = raw.get("fabric")
    if fabric is not None and not is_fabric_kind(fabric):
        raise JobError(f"fabric: not a fabric kind: {fabric!r}")
    return Job(
        specs=tuple(_spec(s, n) for n, s in enumerate(specs)), policy=policy, report=report,
        ready_file=_typed(raw, "ready_file", (str, type(None))),
        ready_info=dict(_typed(raw, "ready_info", (dict,))),
        pid_dir=_typed(raw, "pid_dir", (str, type(None))),
        fabric=fabric,
        probe_root=_typed(raw, "probe_root", (str, type(None))), imex_probe=imex_probe,
        fm_check=fm_check, state_dir=_typed(raw, "state_dir", (str, type(None))),
        lock_fd=_typed(raw, "lock_fd", (int, type(None))),
        log_format=_log_format(raw.get("log_format", "text")),
        kernel_watch=_typed(raw, "kernel_watch", (dict, type(None))),
        hints=_hints(raw.get("hints")))


def _hints(raw: Any) -> HintContext:
    """The job's :class:`HintContext` from its JSON form (every field, of its type)."""
    names = {f.name for f in fields(HintContext)}
    if not isinstance(raw, Mapping) or set(raw) != names:
        raise JobError(f"hints: an object of the keys {sorted(names)}")
    text = ("root", "fm_log")
    maybe = ("fm_runner", "imex_owner", "imex_runner", "imex_config")
    if not (all(isinstance(raw[k], str) for k in text)
            and all(isinstance(raw[k], str | None) for k in maybe)
            and isinstance(raw["nvfabric_unit"], bool)
            and raw["fm_runner"] in (*RUNNERS, None)):
        raise JobError("hints: root and fm_log text, nvfabric_unit true or false, the others "
                       "text or null (fm_runner one of nvfabric, unit, none)")
    return HintContext(**raw)


def _log_format(word: object) -> str:
    if word not in ("text", "json"):
        raise JobError(f"log_format: text or json, not {word!r}")
    return str(word)
