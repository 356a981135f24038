"""Talos Linux's own rules for a system extension, restated as checks of an unpacked image.

Sources (siderolabs/talos at ad8823176e75b9cd07647ddde13c34f2ab77c663, read, not copied):

- ``pkg/machinery/extensions/load.go`` (``Load``): the extension directory holds exactly
  ``manifest.yaml`` and ``rootfs``, nothing else ("unexpected file"); the manifest is not empty
  and its ``version`` is ``v1alpha1``.
- ``pkg/machinery/extensions/metadata.go``: the manifest's ``metadata`` keys (name, version,
  author, description, compatibility.talos.version, extraInfo).
- ``pkg/machinery/extensions/validate.go`` (``validateConstraints``): the compatibility
  constraint is a blang/semver range, a ``v`` before a digit removed, checked against the core
  version of the running Talos. (``validateContents``): walking ``rootfs``, nothing
  world-writable, no special file (only directories, regular files, symbolic links), and every
  non-directory under one of ``AllowedPaths`` (a prefix match). Talos tests the write bit on
  ``fs.DirEntry.Type()``, which carries only the type bits, so its own check never fires; the
  check here tests the real mode, the rule as written.
- ``pkg/machinery/extensions/extensions.go``: ``AllowedPaths``.
- ``pkg/machinery/extensions/services/services.go`` (``Spec.Validate``): the service name
  matches ``^[-_a-z0-9]{1,}$``; ``restart`` is one of the ``RestartKind`` values
  (``restart_kind.go``: always, never, untilSuccess); ``container.entrypoint`` is not empty;
  each ``depends`` entry sets exactly one of service, path (absolute), network (values of
  ``nethelpers.Status``: addresses, connectivity, hostname, etcfiles), time, configuration.
- ``internal/app/machined/pkg/system/services/extension.go``: the service's root is
  ``/usr/local/lib/containers/<name>`` (``constants.ExtensionServiceRootfsPath``); its
  specs are read from ``/usr/local/etc/containers`` (``constants.ExtensionServiceConfigPath``);
  the process is ``entrypoint`` then ``args``, with a read-only root unless
  ``security.writeableRootfs``. ``Runner``: every mount source that does not exist is
  created with ``os.MkdirAll(source, 0o700)`` before the container starts, and a ``depends``
  path makes the service wait (``conditions.WaitForFileToExist``) before that. So a bind
  mount of a file the host gets from another extension (NVML under ``/usr/local/lib``, on the
  read-only system image) must be a ``depends: path``: without it Talos tries to create it as
  a directory and the start fails instead of waiting (:func:`check_mount_sources`; Talos's
  writable places are ``/var`` (the EPHEMERAL partition) and ``/run``, ``/system``, ``/tmp``
  (tmpfs); ``/dev``, ``/sys`` and ``/proc`` always exist).

Talos decodes the YAML without rejecting unknown keys; these checks reject them, so that a
misspelt key (``depend:``) is an error here instead of a silently ignored setting.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

ALLOWED_PATHS = (
    "/etc/cri/conf.d", "/usr/lib/firmware", "/usr/lib/modules",
    "/usr/lib/ld-linux-x86-64.so.2", "/usr/lib/ld-linux-aarch64.so.1", "/usr/bin/ldconfig",
    "/etc/ld.so.conf", "/etc/ld.so.cache", "/usr/bin/nvidia-modprobe", "/usr/bin/nvidia-pcc",
    "/usr/bin/nvidia-smi", "/usr/bin/nvidia-ctk", "/usr/bin/nvidia-cdi-hook", "/usr/bin/nvme",
    "/usr/lib/udev/rules.d", "/usr/local", "/usr/share/glvnd", "/usr/share/egl",
    "/etc/vulkan",
)
CONFIG_PATH = "/usr/local/etc/containers"
ROOTFS_PATH = "/usr/local/lib/containers"
NAME_RE = re.compile(r"^[-_a-z0-9]{1,}$")
RESTART_KINDS = ("always", "never", "untilSuccess")
NETWORK_STATUSES = ("addresses", "connectivity", "hostname", "etcfiles")
METADATA_KEYS = {"name", "version", "author", "description", "compatibility", "extraInfo"}
SPEC_KEYS = {"name", "container", "depends", "restart", "logToConsole"}
CONTAINER_KEYS = {"entrypoint", "environment", "environmentFile", "args", "mounts", "security"}
SECURITY_KEYS = {"writeableSysfs", "maskedPaths", "readonlyPaths", "writeableRootfs",
                 "rootfsPropagation"}
DEPEND_KEYS = ("service", "path", "network", "time", "configuration")
#: Host places where Talos can create a missing mount source (writable at run time), and
#: those that always exist: any other source must be a ``depends: path`` (module doc).
WRITABLE_HOST = ("/var/", "/run/", "/system/", "/tmp/")
ALWAYS_THERE = ("/dev", "/sys", "/proc")
MOUNT_KEYS = {"source", "destination", "type", "options", "uidMappings", "gidMappings"}


def _version(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?", text)
    if not m:
        raise ValueError(f"not a semantic version: {text!r}")
    return int(m[1]), int(m[2]), int(m[3])


_OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        "<": lambda a, b: a < b, "=": lambda a, b: a == b, "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b, "!": lambda a, b: a != b}


def satisfies(constraint: str, talos: str) -> bool:
    """Whether Talos version ``talos`` meets the range ``constraint`` (blang/semver range
    syntax: AND of space-separated comparisons, ``||`` between alternatives). ValueError for a
    range that does not parse, as Talos's "error parsing Talos version constraint"."""
    core = _version(talos)
    alternatives = []
    for alt in constraint.split("||"):
        tokens = re.findall(r"(>=|<=|!=|==|>|<|=|!)?\s*(v?\d+\.\d+\.\d+\S*)", alt)
        if not tokens or re.sub(r"(>=|<=|!=|==|>|<|=|!)?\s*v?\d+\.\d+\.\d+\S*", "",
                                alt).strip():
            raise ValueError(f"error parsing Talos version constraint: {constraint!r}")
        alternatives.append(all(_OPS[op or "="](core, _version(v)) for op, v in tokens))
    return any(alternatives)


def _unknown(obj: dict[str, Any], known: set[str], where: str) -> list[str]:
    return [f"{where}: unknown key {k!r}" for k in obj if k not in known]


def check_layout(ext: Path) -> list[str]:
    """load.go's rules on the extension directory (the image root) and its manifest."""
    errors = [f"unexpected file {p.name!r}" for p in ext.iterdir()
              if p.name not in ("manifest.yaml", "rootfs")]
    if not (ext / "rootfs").is_dir():
        errors.append("extension rootfs is missing")
    if not (ext / "manifest.yaml").is_file():
        return [*errors, "extension manifest is missing"]
    manifest = yaml.safe_load((ext / "manifest.yaml").read_text())
    if not isinstance(manifest, dict) or not manifest:
        return [*errors, "extension manifest is missing"]
    errors += _unknown(manifest, {"version", "metadata"}, "manifest")
    if manifest.get("version") != "v1alpha1":
        errors.append(f"unsupported manifest version: {manifest.get('version')!r}")
    meta = manifest.get("metadata") or {}
    errors += _unknown(meta, METADATA_KEYS, "metadata")
    for key in ("name", "version", "author", "description"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            errors.append(f"metadata.{key} is missing")
    constraint = ((meta.get("compatibility") or {}).get("talos") or {}).get("version", "")
    if constraint:
        try:
            satisfies(constraint, "v1.0.0")
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def check_contents(rootfs: Path) -> list[str]:
    """validate.go's validateContents on ``rootfs``: write bits, special files, allowed paths."""
    errors = []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            item = "/" + str(path.relative_to(rootfs))
            st = path.lstat()
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o002:
                errors.append(f"world-writeable files are not allowed: {item!r}")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                errors.append(f"special files are not allowed: {item!r}")
            if not any(item.startswith(allowed) for allowed in ALLOWED_PATHS):
                errors.append(f"path {item!r} is not allowed in extensions")
    return errors


def check_service(spec: Any, where: str) -> list[str]:
    """services.go's Spec.Validate, plus no unknown keys."""
    if not isinstance(spec, dict):
        return [f"{where}: not a mapping"]
    errors = _unknown(spec, SPEC_KEYS, where)
    if not isinstance(spec.get("name"), str) or not NAME_RE.match(spec["name"]):
        errors.append(f"{where}: name {spec.get('name')!r} is invalid")
    if spec.get("restart") not in RESTART_KINDS:
        errors.append(f"{where}: restart kind is invalid: {spec.get('restart')!r}")
    container = spec.get("container") or {}
    errors += _unknown(container, CONTAINER_KEYS, f"{where}: container")
    errors += _unknown(container.get("security") or {}, SECURITY_KEYS, f"{where}: security")
    if not container.get("entrypoint"):
        errors.append(f"{where}: container endpoint can't be empty")
    for mount in container.get("mounts") or []:
        errors += _unknown(mount, MOUNT_KEYS, f"{where}: mount")
    for i, dep in enumerate(spec.get("depends") or []):
        at = f"{where}: depends[{i}]"
        if not isinstance(dep, dict):
            errors.append(f"{at}: not a mapping")
            continue
        errors += _unknown(dep, set(DEPEND_KEYS), at)
        kinds = [k for k in DEPEND_KEYS if dep.get(k)]
        if not kinds:
            errors.append(f"{at}: no dependency specified")
        if len(kinds) > 1:
            errors.append(f"{at}: more than a single dependency is set")
        if dep.get("path") and not str(dep["path"]).startswith("/"):
            errors.append(f"{at}: path is not absolute: {dep['path']!r}")
        for status in dep.get("network") or []:
            if status not in NETWORK_STATUSES:
                errors.append(f"{at}: invalid network dependency: {status!r}")
    return errors


def check_mount_sources(spec: dict[str, Any], where: str) -> list[str]:
    """extension.go's Runner on the spec's mounts: a bind source Talos cannot create (outside
    :data:`WRITABLE_HOST`, not one of :data:`ALWAYS_THERE`) must be waited for with a
    ``depends: path`` of exactly that source."""
    waited = {d.get("path") for d in spec.get("depends") or [] if isinstance(d, dict)}
    errors = []
    for mount in (spec.get("container") or {}).get("mounts") or []:
        source = str(mount.get("source", ""))
        if source in ALWAYS_THERE or source.startswith(WRITABLE_HOST) or source in waited:
            continue
        errors.append(f"{where}: mount source {source} is neither writable on Talos nor a "
                      "`depends: path`: Talos would create it as a directory (MkdirAll) on "
                      "its read-only image instead of waiting for it")
    return errors


def check_services(rootfs: Path) -> list[str]:
    """Every service spec under /usr/local/etc/containers, and the root Talos runs it in:
    /usr/local/lib/containers/<name>/ with the entrypoint an executable file there."""
    specs = sorted((rootfs / CONFIG_PATH.lstrip("/")).glob("*.yaml"))
    if not specs:
        return [f"no service spec under {CONFIG_PATH}"]
    errors = []
    for path in specs:
        where = f"{CONFIG_PATH}/{path.name}"
        spec = yaml.safe_load(path.read_text())
        found = check_service(spec, where)
        if not found:
            found = check_mount_sources(spec, where)
        errors += found
        if found:
            continue
        root = rootfs / ROOTFS_PATH.lstrip("/") / spec["name"]
        if not root.is_dir():
            errors.append(f"{where}: no container root {ROOTFS_PATH}/{spec['name']}")
            continue
        entry = root / spec["container"]["entrypoint"].lstrip("/")
        if not entry.is_file() or not os.access(entry, os.X_OK):
            errors.append(f"{where}: entrypoint {spec['container']['entrypoint']} is not an "
                          "executable file of the container root")
    return errors
