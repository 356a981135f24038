"""Read every GPU's fabric state from a node, through one of two sources behind one door.

The door (:func:`source_for`): a root whose ``proc`` is the running kernel's procfs
(:func:`nvfabric.model.hostpath.is_live`: ``/`` on the node itself) is read through NVML
(:func:`nvml_source`, ``nvidia-ml-py``, the driver of the running kernel); any other root is a
directory holding a node's files and is read through its own ``bin/nvidia-smi -q -x``
(:func:`smi_source`; the fake written by ``nvfabric simulate``). A caller may inject a source
of its own (``read_health(root, source=...)``), as httpx takes a transport: the readers do
not branch on the root.

This is the contract the supervisor relies on: :func:`read` returns one GpuFabric per GPU.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from nvfabric.effects import program, stop
from nvfabric.facts import nvml
from nvfabric.facts.smi import SmiFormatError, load_xml_parser, parse
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.model.health import FabricHealth, GpuFabric, summarise_gpus
from nvfabric.model.hostpath import PathEscape, is_live, under
from nvfabric.model.words import seconds

SMI_TIMEOUT_S = 15.0
#: The most of ``nvidia-smi -q -x``'s output read: the limit of a saved capture
#: (docs/readers.md, "Sizes"; an 8-GPU node's is ~250 KB); a program printing more is killed at it.
SMI_MAX_BYTES = 16 << 20


#: A source of fabric state: given the probe's time bound (seconds), the reading.
Source = Callable[[float], FabricHealth]


def read(root: str) -> list[GpuFabric]:
    """The GPUs' fabric state (empty when it cannot be read; :func:`read_health` says why)."""
    return list(read_health(root).gpus)


def check(root: str) -> GpuCheck:
    """The GPUs' fabric state of ``root`` (:func:`read`: NVML on the node itself, the node's
    nvidia-smi on a simulated root) summarised for readiness
    (:func:`nvfabric.model.health.summarise_gpus`, the rule the preflight uses too)."""
    return summarise_gpus(read(root))


def read_health(root: str, timeout: float = SMI_TIMEOUT_S,
                source: Source | None = None) -> FabricHealth:
    """The full reading with the reader's findings, from ``source`` (default
    :func:`source_for` ``(root)``). Never raises for a missing library or a failing
    nvidia-smi: those become findings (``nvml_unavailable``, ``driver_not_loaded``).

    ``timeout`` (seconds) bounds the whole probe: NVML is read in a helper thread that is
    abandoned when it does not answer in time, the node's nvidia-smi runs in its own process
    group, killed whole (its children too) at the timeout. Either way the answer is an
    ``nvml_unavailable`` finding with ``reason: timeout``.
    """
    return (source or source_for(root))(timeout)


def source_for(root: str) -> Source:
    """The door: NVML for a live root (:func:`nvfabric.model.hostpath.is_live`), else the root's
    own ``bin/nvidia-smi``."""
    return nvml_source if is_live(root) else smi_source(root)


def nvml_source(timeout: float) -> FabricHealth:
    """NVML of the running system, bounded by ``timeout`` seconds (:func:`_bounded`)."""
    return _bounded(nvml.read, timeout)


def smi_source(root: str) -> Source:
    """The source that runs ``root``'s ``bin/nvidia-smi -q -x`` and parses its XML; a root
    without an executable one is the finding ``nvml_unavailable`` (``reason: no_nvidia_smi``)."""
    smi = under(root, "/bin/nvidia-smi")

    def read_smi(timeout: float) -> FabricHealth:
        if not os.access(smi, os.X_OK):
            # the source this root has is its nvidia-smi (NVML is never read under a root)
            return FabricHealth("nvidia-smi-xml", (), findings=(Finding(
                "nvml_unavailable", "error",
                f"the simulated root {root} has no bin/nvidia-smi to read fabric state from",
                "write one with `nvfabric simulate PROFILE DIR`, or read a capture with "
                "--from-nvidia-smi FILE",
                {"reason": "no_nvidia_smi"},
            ),))
        return _run_smi(smi, timeout)

    return read_smi


def _run_smi(smi: str, timeout: float) -> FabricHealth:
    """``smi -q -x`` through the probe door (:func:`nvfabric.effects.program.run`: its output
    at most :data:`SMI_MAX_BYTES`, killed at ``timeout`` seconds or the cap, not run when it
    is a link out of the root), its XML parsed."""
    try:
        ran = program.run([smi, "-q", "-x"], timeout, SMI_MAX_BYTES, meanwhile=load_xml_parser)
    except OSError as error:
        return _failed(f"{smi} -q -x did not run: {error.strerror or error}")
    except PathEscape as error:
        return _failed(str(error), "outside_root")
    if ran.timed_out:
        return _failed(f"{smi} -q -x did not answer within {seconds(timeout)} s (killed)",
                       "timeout")
    if ran.rc is None:
        assert ran.limit is not None
        return _failed(ran.limit_text(), "output_limit",
                       {"program": smi, "limit": ran.limit.what, "limit_value": ran.limit.value})
    if ran.rc != 0:
        first = (ran.stderr or ran.stdout).decode("utf-8", "replace").strip().splitlines()
        return _failed(f"{smi} -q -x exited {ran.rc}: {first[0] if first else ''}")
    try:
        return parse(ran.stdout.decode("utf-8", "replace"))
    except SmiFormatError as error:
        return _failed(f"{smi} -q -x printed no readable capture: {error}")


def _bounded(read: Callable[[], FabricHealth], timeout: float) -> FabricHealth:
    """``read()`` in a daemon thread, given ``timeout`` seconds; a reading that does not come
    back in time (an NVML call blocked in the driver) is a finding, and the thread is left
    behind (it cannot be interrupted; it ends with the process). A stop signal
    (:mod:`nvfabric.effects.stop`) ends the wait at once: Stopped."""
    box: list[FabricHealth] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            box.append(read())
        except BaseException as err:  # noqa: BLE001 - handed back to the caller below
            failure.append(err)

    done_r, done_w = os.pipe2(os.O_CLOEXEC)

    def work_and_say() -> None:
        stop.block_in_thread()
        try:
            work()
        finally:
            os.close(done_w)  # readable (end of file) at the reader: the answer is in

    thread = threading.Thread(target=work_and_say, name="nvml-read", daemon=True)
    try:
        thread.start()
        stop.wait([done_r], timeout)  # Stopped when a stop signal comes meanwhile
    finally:
        os.close(done_r)
    if failure:
        raise failure[0]
    if box:
        return box[0]
    return FabricHealth("nvml", (), findings=(Finding(
        "nvml_unavailable", "error", f"NVML did not answer within {seconds(timeout)} s",
        "a GPU or the driver is hung: check `dmesg` for Xid errors and whether `nvidia-smi` "
        "answers; a GPU reset or reboot is usually needed",
        {"reason": "timeout", "timeout_s": timeout},
    ),))


def _failed(message: str, reason: str = "nvidia_smi_failed",
            fields: dict[str, object] | None = None) -> FabricHealth:
    return FabricHealth("nvidia-smi-xml", (), findings=(Finding(
        "nvml_unavailable", "error", message,
        "run the same command by hand; a driver that is not loaded makes nvidia-smi fail, a "
        "hung GPU makes it hang (check `dmesg` for Xid errors)",
        {"reason": reason, **(fields or {})},
    ),))
