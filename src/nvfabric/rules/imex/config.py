"""IMEX config.cfg: nvfabric's changes to the shipped file, validated. Pure.

The shipped ``/etc/nvidia-imex/config.cfg`` is patched with :mod:`nvfabric.model.keyvalue`
(comments and key order kept). Under ``nvfabric run`` the daemon runs in the foreground with
its log on stderr, so that the supervisor sees every line: DAEMONIZE=0, LOG_FILE_NAME empty,
LOG_USE_SYSLOG=0; the command service stays on for readiness (``nvidia-imex-ctl -q``).
Key meanings and allowed values: the comment blocks of the shipped file
(tests/data/corpus/imex/k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg,
aws-parallelcluster-nvidia-imex-config.erb); NVIDIA IMEX guide, "IMEX Service Config Options".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from nvfabric.model import hostpath, keyvalue
from nvfabric.model.findings import Finding
from nvfabric.model.keyvalue import ConfigValueError, KeyValueFile
from nvfabric.model.strict import int_or_none
from nvfabric.rules.imex.tables import NODES_CONFIG_PATH

#: Command service port when the shipped file sets none (value of the shipped templates).
DEFAULT_CMD_PORT = "50005"

#: The keys of the shipped config.cfg whose defaults nvfabric relies on, in the shipped order,
#: with the shipped values. Source: tests/data/corpus/imex/
#: k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg; NVIDIA IMEX guide, "IMEX Service
#: Config Options".
SHIPPED_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("LOG_LEVEL", "4"),
    ("LOG_FILE_NAME", "/var/log/nvidia-imex.log"),
    ("LOG_APPEND_TO_LOG", "0"),
    ("LOG_USE_SYSLOG", "0"),
    ("DAEMONIZE", "1"),
    ("BIND_INTERFACE_IP", ""),
    ("SERVER_PORT", "50000"),
    ("IMEX_NODE_CONFIG_FILE", NODES_CONFIG_PATH),
    ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
    ("IMEX_CMD_ENABLED", "1"),
    ("IMEX_CMD_PORT", DEFAULT_CMD_PORT),
)

#: What running under nvfabric changes: the daemon in the foreground, its log on stderr (an
#: empty LOG_FILE_NAME), no syslog, so that the supervisor sees every line.
FOREGROUND: dict[str, str] = {"DAEMONIZE": "0", "LOG_FILE_NAME": "", "LOG_USE_SYSLOG": "0"}


def defaults_text(header: str, changes: Mapping[str, str] | None = None) -> str:
    """A config.cfg of :data:`SHIPPED_DEFAULTS` (with ``changes`` to their values), after the
    comment lines ``header``."""
    changed = changes or {}
    lines = [header.rstrip("\n")] + [f"{k}={changed.get(k, v)}" for k, v in SHIPPED_DEFAULTS]
    return "\n".join(lines) + "\n"


#: Used when no shipped config.cfg exists (IMEX installed without its config, simulated
#: nodes): the shipped defaults, in the foreground.
MINIMAL_CONFIG = defaults_text(
    "# NVIDIA IMEX configuration written by nvfabric: no shipped config.cfg was found.\n"
    "# Keys and defaults: NVIDIA IMEX guide, \"IMEX Service Config Options\".",
    FOREGROUND,
)


def _flag(value: str) -> str | None:
    return None if value in ("0", "1") else "must be 0 or 1"


def _port(value: str) -> str | None:
    if value == "":
        return None
    return None if int_or_none(value, high=65535) is not None else "must be a port 0-65535"


def _level(value: str) -> str | None:
    return None if value in ("0", "1", "2", "3", "4") else "must be 0-4"


def _path(value: str) -> str | None:
    if value == "":
        return None
    return hostpath.problem(value) or (
        None if len(value) <= 256 else "is longer than 256 characters")


def _required_path(value: str) -> str | None:
    return "must not be empty" if value == "" else _path(value)


def _ip(value: str) -> str | None:
    if value == "":
        return None
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "must be an IPv4 or IPv6 address, or empty"
    return None


def _quorum(value: str) -> str | None:
    return None if value in ("NONE", "RECOVERY") else "must be NONE or RECOVERY"


#: The keys whose value is a host path (nvfabric writes IMEX_NODE_CONFIG_FILE; the daemon
#: writes the others), each confined to the root by ``nvfabric imex config``.
PATH_KEYS = ("LOG_FILE_NAME", "STATS_FILE_NAME", "IMEX_NODE_CONFIG_FILE",
             "IMEX_CMD_UNIX_DOMAIN_PATH")

#: Key -> validator (None = fine, else the reason). Source: the comment block of each key in
#: the shipped config.cfg (captures above).
VALIDATORS: dict[str, Callable[[str], str | None]] = {
    "LOG_LEVEL": _level,
    "LOG_FILE_NAME": _path,
    "STATS_FILE_NAME": _path,
    "LOG_APPEND_TO_LOG": _flag,
    "LOG_USE_SYSLOG": _flag,
    "DAEMONIZE": _flag,
    "BIND_INTERFACE_IP": _ip,
    "SERVER_PORT": _port,
    "IMEX_NODE_CONFIG_FILE": _required_path,
    "IMEX_WAIT_FOR_QUORUM": _quorum,
    "IMEX_ENABLE_AUTH_ENCRYPTION": _flag,
    "IMEX_CMD_ENABLED": _flag,
    "IMEX_CMD_BIND_INTERFACE_IP": _ip,
    "IMEX_CMD_PORT": _port,
    "IMEX_CMD_UNIX_DOMAIN_PATH": _path,
}


def validate(changes: Mapping[str, str]) -> None:
    """Raise ConfigValueError (naming the key) for a value the daemon would reject or that
    could inject a line."""
    for key, value in changes.items():
        keyvalue.validate(key, value)
        check = VALIDATORS.get(key)
        problem = check(value) if check else None
        if problem:
            raise ConfigValueError(key, f"{value!r} {problem}")


def run_overrides(shipped: KeyValueFile, nodes_config_path: str,
                  socket: str | None = None) -> dict[str, str]:
    """What ``nvfabric run`` changes: foreground, stderr logging, the node list it checked,
    and the command service on (a port when the shipped file sets neither port nor socket).
    ``socket``: the command socket to serve (IMEX_CMD_UNIX_DOMAIN_PATH), the one the DRA
    driver's kubelet plugin queries in its host-managed mode (DRA driver prerequisites,
    "Host-managed IMEX": IMEX_CMD_ENABLED=1, IMEX_CMD_UNIX_DOMAIN_PATH)."""
    changes = {
        **FOREGROUND,
        "IMEX_NODE_CONFIG_FILE": nodes_config_path,
        "IMEX_CMD_ENABLED": "1",
    }
    if socket:
        changes["IMEX_CMD_UNIX_DOMAIN_PATH"] = socket
    items = shipped.items()
    if (not socket and not items.get("IMEX_CMD_PORT")
            and not items.get("IMEX_CMD_UNIX_DOMAIN_PATH")):
        changes["IMEX_CMD_PORT"] = DEFAULT_CMD_PORT
    return changes


def effective(shipped_text: str | None, changes: Mapping[str, str]) -> str:
    """The shipped text (or :data:`MINIMAL_CONFIG`) with ``changes`` applied, comments and
    order kept; raises ConfigValueError."""
    validate(changes)
    cfg = keyvalue.parse(shipped_text if shipped_text is not None else MINIMAL_CONFIG)
    return keyvalue.render(keyvalue.patch(cfg, changes))


def node_config_path(cfg_text: str | None, default: str) -> str:
    """IMEX_NODE_CONFIG_FILE of a config text, ``default`` when unset or not a plain path
    (a template placeholder)."""
    if cfg_text is None:
        return default
    value = keyvalue.parse(cfg_text).get("IMEX_NODE_CONFIG_FILE") or ""
    return value if value.startswith("/") and _path(value) is None else default


def node_config_rewrite(cfg_text: str, new_path: str) -> Finding | None:
    """An info finding (``imex_node_config_rewritten``) when the config text names an
    IMEX_NODE_CONFIG_FILE that nvfabric replaces by ``new_path`` because it is not a plain
    absolute path (relative, with ``..``, a template placeholder); None when the value is
    already ``new_path`` or unset. nvidia-imex resolves a relative value against its working
    directory, not /etc/nvidia-imex, so such a value is not kept; the finding names both."""
    old = keyvalue.parse(cfg_text).get("IMEX_NODE_CONFIG_FILE") or ""
    if old in ("", new_path):
        return None
    why = "is not an absolute path" if not old.startswith("/") else (_path(old) or "is unusable")
    return Finding(
        "imex_node_config_rewritten", "info",
        f"IMEX_NODE_CONFIG_FILE={old} {why}: set to {new_path}",
        "give --nodes-config (or --set IMEX_NODE_CONFIG_FILE=...) with an absolute path to "
        "choose another file",
        {"key": "IMEX_NODE_CONFIG_FILE", "old": old, "new": new_path},
    )


def check_known(shipped_text: str, sets: Mapping[str, str]) -> None:
    """ConfigValueError naming the key (and the nearest known one, :mod:`difflib`) for a
    ``--set`` key that nvidia-imex does not know: a typo (``SERVER_PORTT``) would otherwise be
    appended to config.cfg and silently ignored by the daemon, as ``--fm-set`` refuses for
    fabric manager. Known: the keys of the shipped config.cfg, set or commented out, plus
    :data:`VALIDATORS` and :data:`SHIPPED_DEFAULTS` (NVIDIA IMEX guide, "IMEX Service Config
    Options")."""
    known = (set(keyvalue.documented_keys(shipped_text)) | set(VALIDATORS)
             | {k for k, _ in SHIPPED_DEFAULTS})
    by_upper = {k.upper(): k for k in sorted(known)}
    for key in sets:
        if key in known:
            continue
        import difflib  # only a mistyped key needs it

        near = difflib.get_close_matches(key.upper(), list(by_upper), n=1, cutoff=0.6)
        hint = f"; did you mean {by_upper[near[0]]}?" if near else ""
        raise ConfigValueError(key, "not a key nvidia-imex knows (not in the shipped "
                               f"config.cfg){hint}")


def parse_set(items: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` option values as a dict; ConfigValueError for one without ``=``. The value
    is kept as given: blanks at its ends are refused when it is set (``keyvalue.validate``)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigValueError(item, "expected KEY=VALUE")
        out[key.strip()] = value
    return out
