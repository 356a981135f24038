"""The effective ``fabricmanager.cfg``: the shipped file plus nvfabric's and the operator's
overrides, written to nvfabric's state directory. The shipped file is never edited in place.
Pure but for the links of the paths fabric manager writes (``_resolve``); the reads of the
shipped file and the path checks are :mod:`nvfabric.facts.fmconfig`.

Keys and their meaning: NVIDIA Fabric Manager User Guide, "Fabric Manager Config Options";
shipped examples tests/data/corpus/configs/fabricmanager-535.216.01.cfg and
bottlerocket-nvidia-fabricmanager.cfg. Overrides, later wins:

1. the shipped file as is (comments and key order kept, see :mod:`nvfabric.model.keyvalue`);
2. operator overrides from the environment, ``NVFM_CONFIG_<KEY>=<VALUE>`` (the convention of
   the GPU Operator driver container);
3. operator overrides given as ``--fm-set KEY=VALUE``;
4. nvfabric's own: ``DAEMONIZE=0`` (nvfabric supervises the process, a forking daemon would
   look like an exit), ``FM_SM_MGMT_PORT_GUID`` on NVLink 5 (the same GUID NVLSM gets), and
   ``FABRIC_MODE`` when asked (``--fabric-mode``). The operator may not override ``DAEMONIZE``
   or ``FM_SM_MGMT_PORT_GUID``: they are how nvfabric runs fabric manager; ``--fabric-mode``
   and a different ``--fm-set FABRIC_MODE`` on one command line are refused (neither is the
   later layer), while ``--fabric-mode`` over ``NVFM_CONFIG_FABRIC_MODE`` is the order above.

Path-valued keys are resolved under the root (a simulated node is a directory; on ``/`` they
are unchanged) so that the daemon, which runs in nvfabric's mount namespace, finds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nvfabric.model import keyvalue
from nvfabric.model.findings import Finding
from nvfabric.model.fmkeys import (
    ENV_PREFIX,
    OWNED_KEYS,
    PATH_KEYS,
    ConfigError,
    check_value,
    invalid,
    known_keys,
)
from nvfabric.model.hostpath import confined, under


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """``NVFM_CONFIG_<KEY>=<VALUE>`` variables as ``{KEY: VALUE}`` (sorted by key)."""
    return {k[len(ENV_PREFIX):]: v for k, v in sorted(environ.items())
            if k.startswith(ENV_PREFIX) and len(k) > len(ENV_PREFIX)}


def parse_sets(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--fm-set KEY=VALUE`` arguments as a dict; ConfigError on a malformed one. The value is
    kept as given (blanks at its ends are refused later, as in ``NVFM_CONFIG_*``)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not keyvalue.KEY.fullmatch(key):
            raise ConfigError(invalid(key or item, f"--fm-set expects KEY=VALUE, got {item!r}"))
        out[key] = value
    return out


@dataclass(frozen=True)
class Effective:
    """The effective config: ``cfg`` (lines, for rendering) and ``text`` (what is written)."""

    cfg: keyvalue.KeyValueFile
    text: str

    def get(self, key: str) -> str | None:
        return self.cfg.get(key)


def check_known(shipped: str, environ: Mapping[str, str], sets: Mapping[str, str]) -> None:
    """ConfigError (``config_invalid_value`` naming the key and where it came from, the
    nearest known key in the hint, :mod:`difflib`) for an override of a key that fabric
    manager does not know (:func:`known_keys`): a typo would otherwise be appended to the
    config and silently ignored by fabric manager."""
    known = known_keys(shipped)
    named = [(k, f"{ENV_PREFIX}{k}") for k in env_overrides(environ)]
    named += [(k, f"--fm-set {k}") for k in sets]
    for key, source in named:
        if key in known:
            continue
        # Keys are upper case: compare in upper case, so `log_level` is told LOG_LEVEL.
        by_upper = {k.upper(): k for k in sorted(known)}
        import difflib  # lazy: only a mistyped key needs it

        near = [by_upper[m] for m in difflib.get_close_matches(key.upper(), list(by_upper),
                                                                n=1, cutoff=0.6)]
        hint = (f"did you mean {near[0]}? " if near else "") + (
            "the keys fabric manager knows are those of its shipped fabricmanager.cfg")
        raise ConfigError(Finding(
            "config_invalid_value", "error",
            f"fabricmanager.cfg {key} ({source}): not a key fabric manager knows (not in the "
            "shipped fabricmanager.cfg)", hint,
            {"key": key, "nearest": near[0] if near else None}))


def effective(shipped: str, *, root: str = "/", guid: str | None = None,
              fabric_mode: str | None = None, environ: Mapping[str, str] | None = None,
              sets: Mapping[str, str] | None = None) -> Effective:
    """Build the effective config from the shipped text. Pure.

    Raises ConfigError (a ``config_invalid_value`` finding naming the key) for a malformed
    or forbidden override, or one of a key fabric manager does not know (:func:`check_known`).
    """
    check_known(shipped, environ or {}, sets or {})
    operator: dict[str, str] = {}
    operator.update(env_overrides(environ or {}))
    operator.update(sets or {})
    for key in operator:
        if key in OWNED_KEYS:
            raise ConfigError(invalid(
                key, "is set by nvfabric and may not be overridden",
                "nvfabric runs fabric manager in the foreground (DAEMONIZE=0) and passes the "
                "management port GUID itself; drop this override"))
    given = (sets or {}).get("FABRIC_MODE")
    if fabric_mode is not None and given is not None and given != fabric_mode:
        # both typed on one command line: neither is the later layer, the operator meant one
        raise ConfigError(invalid(
            "FABRIC_MODE", f"--fabric-mode {fabric_mode} and --fm-set FABRIC_MODE={given} "
            "disagree", "give the fabric mode once: --fabric-mode, or --fm-set FABRIC_MODE"))
    changes: dict[str, str] = dict(operator)
    changes["DAEMONIZE"] = "0"
    if guid is not None:
        changes["FM_SM_MGMT_PORT_GUID"] = guid
    if fabric_mode is not None:
        changes["FABRIC_MODE"] = fabric_mode
    for key, value in changes.items():
        check_value(key, value)
    cfg = keyvalue.patch(keyvalue.parse(shipped), changes)
    shipped_paths = {key: value for key, value in cfg.items().items()
                     if key in PATH_KEYS and value}
    for key, value in shipped_paths.items():  # the shipped file's values too, before resolving
        check_value(key, value)
    paths = {key: _resolve(root, key, value) for key, value in shipped_paths.items()}
    for key, value in paths.items():
        check_value(key, value)
    if any(paths[k] != cfg.get(k) for k in paths):
        cfg = keyvalue.patch(cfg, paths)
    return Effective(cfg, keyvalue.render(cfg))


def _resolve(root: str, key: str, value: str) -> str:
    """A path key's value under the root; the files fabric manager writes ("parent" keys: log,
    state file, sockets) with every symbolic link followed and refused (ConfigError naming the
    key) when they lead out of the root (:func:`nvfabric.model.hostpath.confined`)."""
    if PATH_KEYS.get(key) != "parent":
        return under(root, value)
    try:
        return confined(root, value, key)
    except ValueError as err:
        raise ConfigError(invalid(
            key, f"leaves the root through a symbolic link ({err})",
            f"point {key} at a path whose directories stay under --root")) from None
