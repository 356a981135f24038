"""Fabric manager's config keys (``fabricmanager.cfg``): which keys nvfabric owns, which take
paths and what must hold for each, the values of the enumerated and numeric keys, and the
errors of a value that may not be written. Shared by the readers (the shipped file and the
paths its keys name, :mod:`nvfabric.facts.fmconfig`), the effective config
(:mod:`nvfabric.bringup.fmconfig`) and the services reader. Pure.

Keys and their meaning: NVIDIA Fabric Manager User Guide, "Fabric Manager Config Options";
shipped example tests/data/corpus/configs/fabricmanager-535.216.01.cfg.
"""

from __future__ import annotations

import re

from nvfabric.model import hostpath, keyvalue
from nvfabric.model.errors import InputError
from nvfabric.model.findings import Finding
from nvfabric.model.strict import int_or_none

ENV_PREFIX = "NVFM_CONFIG_"
OWNED_KEYS = frozenset({"DAEMONIZE", "FM_SM_MGMT_PORT_GUID"})

#: Path-valued keys and what must hold for each (User Guide, "Fabric Manager Config Options";
#: the talos case tests/data/corpus/logs/talos-fm-config-invalid-value-ext511.txt for
#: FABRIC_NODE_CONFIG_FILE): "dir" an existing directory, "parent" the file's directory exists
#: or can be created, "file" an existing file. An empty value means unset.
PATH_KEYS: dict[str, str] = {
    "TOPOLOGY_FILE_PATH": "dir",
    "DATABASE_PATH": "dir",
    "STATE_FILE_NAME": "parent",
    "LOG_FILE_NAME": "parent",
    "FABRIC_NODE_CONFIG_FILE": "file",
    "UNIX_SOCKET_PATH": "parent",
    "FM_CMD_UNIX_SOCKET_PATH": "parent",
    "FM_SM_IPC_INTERFACE": "parent",
}

_GUID = re.compile(r"0x[0-9a-fA-F]{16}")

#: Allowed values of enumerated and numeric keys (User Guide, "Fabric Manager Config Options").
CHOICES: dict[str, frozenset[str]] = {
    "DAEMONIZE": frozenset({"0", "1"}),
    "FABRIC_MODE": frozenset({"0", "1", "2"}),
    "FABRIC_MODE_RESTART": frozenset({"0", "1"}),
    "LOG_LEVEL": frozenset({"0", "1", "2", "3", "4"}),
    "LOG_APPEND_TO_LOG": frozenset({"0", "1"}),
    "LOG_USE_SYSLOG": frozenset({"0", "1"}),
    "FM_STAY_RESIDENT_ON_FAILURES": frozenset({"0", "1"}),
    "ACCESS_LINK_FAILURE_MODE": frozenset({"0", "1"}),
    "TRUNK_LINK_FAILURE_MODE": frozenset({"0", "1"}),
    "NVSWITCH_FAILURE_MODE": frozenset({"0", "1"}),
    "ABORT_CUDA_JOBS_ON_FM_EXIT": frozenset({"0", "1"}),
}
PORTS = ("STARTING_TCP_PORT", "FM_CMD_PORT_NUMBER")


class ConfigError(InputError):
    """An override that may not be written; ``finding`` is a ``config_invalid_value``."""

    code = "config_invalid_value"


def invalid(key: str, message: str, hint: str = "") -> Finding:
    """A ``config_invalid_value`` finding naming ``key``."""
    return Finding("config_invalid_value", "error", f"fabricmanager.cfg {key}: {message}",
                   hint or f"fix {key} (shipped file, --fm-set or {ENV_PREFIX}{key})",
                   {"key": key})


def check_value(key: str, value: str) -> None:
    """Raise ConfigError unless ``value`` is acceptable for ``key`` (single line; choices,
    ports, GUIDs and absolute paths where the key takes them)."""
    try:
        keyvalue.validate(key, value)
    except keyvalue.ConfigValueError as err:
        raise ConfigError(invalid(key, str(err).split(": ", 1)[-1])) from None
    if key in CHOICES and value not in CHOICES[key]:
        allowed = ", ".join(sorted(CHOICES[key]))
        raise ConfigError(invalid(key, f"{value!r} is not one of {allowed}"))
    if key in PORTS and int_or_none(value, high=65535) is None:
        raise ConfigError(invalid(key, f"{value!r} is not a TCP port (0-65535)"))
    if key == "FM_SM_MGMT_PORT_GUID" and not _GUID.fullmatch(value):
        raise ConfigError(invalid(key, f"{value!r} is not 0x followed by 16 hex digits"))
    why = hostpath.problem(value) if key in PATH_KEYS and value else None
    if why is not None:
        raise ConfigError(invalid(key, f"{value!r} {why}"))


def known_keys(shipped: str) -> frozenset[str]:
    """The keys fabric manager of the shipped file's version knows: every ``KEY=`` line of
    the shipped file (set, or commented out as documentation), plus the keys nvfabric sets
    itself (``DAEMONIZE``, ``FM_SM_MGMT_PORT_GUID``, ``FABRIC_MODE``) and those it checks
    from the User Guide (:data:`PATH_KEYS`, choices, ports: ``FABRIC_NODE_CONFIG_FILE`` is
    one a trimmed shipped file may lack). The shipped file of a version lists its keys
    (tests/data/corpus/configs/fabricmanager-535.216.01.cfg)."""
    return (keyvalue.documented_keys(shipped) | OWNED_KEYS | {"FABRIC_MODE"}
            | frozenset(PATH_KEYS) | frozenset(CHOICES) | frozenset(PORTS))


class ShippedConfigError(InputError):
    """The shipped fabricmanager.cfg is not something to build on: a link, not a regular
    file, or without a single key. ``finding`` is an ``input_unreadable``."""
