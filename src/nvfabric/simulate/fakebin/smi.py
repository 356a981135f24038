"""Fake ``nvidia-smi``: ``-q`` text, ``-q -x`` XML and the CSV query of the simulated GPUs'
fabric state (``gpus.json``), ``-L`` and ``-r``. Layouts from tests/data/corpus/nvidia-smi.
Standard library only (copied into simulated trees).
"""

from __future__ import annotations

import time

from .daemon import say
from .state import driver_version, faults, load, node_root, record, save

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

STATE_TEXT = {
    "not_supported": "N/A",
    "not_started": "Not Started",
    "in_progress": "In Progress",
    "completed": "Completed",
}


def nvidia_smi(argv: list[str]) -> int:
    """Fake ``nvidia-smi``: ``-q`` (text), ``-q -x`` (XML), ``--query-gpu=F,.. --format=csv``,
    ``-L``, ``-r`` (GPU reset: fabric state back to not started)."""
    root = node_root()
    flt = faults(root, "nvidia-smi")
    if flt.get("hang"):
        time.sleep(3600)
    driver = driver_version(root)
    if driver is None:
        say("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.")
        return 9
    node = load(root, "node.json", {})
    gpus: list[dict[str, Any]] = load(root, "gpus.json", {"gpus": []}).get("gpus", [])
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if "--query-gpu" in argv:
        i = argv.index("--query-gpu")
        query = argv[i + 1] if i + 1 < len(argv) else ""
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "csv")
    if query is not None:
        return _smi_csv(gpus, node, driver, query, fmt)
    if "-r" in argv or "--gpu-reset" in argv:
        data = load(root, "gpus.json", {"gpus": []})
        for gpu in data.get("gpus", []):
            if gpu.get("state") != "not_supported":
                gpu.update(state="not_started", status="N/A", clique_id=None, cluster_uuid=None,
                           health="N/A")
            say(f"GPU {gpu['pci']} was successfully reset.")
        save(root, "gpus.json", data)
        record(root, "nvidia-smi", "reset")
        say("All done.")
        return 0
    if "-L" in argv or "--list-gpus" in argv:
        for i, gpu in enumerate(gpus):
            say(f"GPU {i}: {gpu['name']} (UUID: {gpu['uuid']})")
        return 0
    if "-q" in argv or "--query" in argv:
        if "-x" in argv or "--xml-format" in argv:
            say(_smi_xml(gpus, node, driver))
        else:
            say(_smi_text(gpus, node, driver))
        return 0
    say(f"NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: "
        f"{node.get('cuda_version', '12.8')}   [fake: summary table omitted]")
    return 0


def _fabric_values(gpu: dict[str, Any]) -> dict[str, str]:
    state = str(gpu.get("state", "not_supported"))
    na = "N/A"
    clique = gpu.get("clique_id")
    return {
        "state": STATE_TEXT.get(state, na),
        "status": str(gpu.get("status") or na),
        "clique": na if clique is None else str(clique),
        "cluster": str(gpu.get("cluster_uuid") or na),
        "summary": str(gpu.get("health") or na),
        "bandwidth": "Full" if gpu.get("health") == "Healthy" and state == "completed" else na,
        "flag": "False" if state == "completed" else na,
    }


def _kv(indent: int, key: str, value: str) -> str:
    """One ``-q`` line: key column 42 wide (535/560 layout, tests/data/cases/S*.yaml)."""
    return (" " * indent + key).ljust(42) + f": {value}"


def _smi_text(gpus: list[dict[str, Any]], node: dict[str, Any], driver: str) -> str:
    lines = ["", "==============NVSMI LOG==============", "",
             _kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
             _kv(0, "Driver Version", driver),
             _kv(0, "CUDA Version", str(node.get("cuda_version", "12.8"))), "",
             _kv(0, "Attached GPUs", str(len(gpus)))]
    for gpu in gpus:
        f = _fabric_values(gpu)
        lines += [
            f"GPU {gpu['pci']}",
            _kv(4, "Product Name", gpu["name"]),
            _kv(4, "Product Brand", "NVIDIA"),
            _kv(4, "Product Architecture", gpu.get("architecture", "N/A")),
            _kv(4, "Persistence Mode", "Enabled"),
            _kv(4, "GPU UUID", gpu["uuid"]),
            _kv(4, "Minor Number", str(gpu.get("minor", 0))),
            "    Fabric",
            _kv(8, "State", f["state"]),
            _kv(8, "Status", f["status"]),
            _kv(8, "CliqueId", f["clique"]),
            _kv(8, "ClusterUUID", f["cluster"]),
            "        Health",
            _kv(12, "Summary", f["summary"]),
            _kv(12, "Bandwidth", f["bandwidth"]),
            _kv(12, "Route Recovery in progress", f["flag"]),
            _kv(12, "Route Unhealthy", f["flag"]),
            _kv(12, "Access Timeout Recovery", f["flag"]),
            _kv(4, "Processes", "None"),
            "",
        ]
    return "\n".join(lines)


def escape(text: str) -> str:
    """XML character data: ``&``, ``<`` and ``>`` as entities, the rest as is (what
    :func:`xml.sax.saxutils.escape` does without extra entities; that module imports
    urllib.request, http.client and email, 25 ms of a fake's start on a slow machine)."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def _smi_xml(gpus: list[dict[str, Any]], node: dict[str, Any], driver: str) -> str:
    out = ['<?xml version="1.0" ?>',
           '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
           "<nvidia_smi_log>",
           f"\t<timestamp>{time.strftime('%a %b %d %H:%M:%S %Y')}</timestamp>",
           f"\t<driver_version>{escape(driver)}</driver_version>",
           f"\t<cuda_version>{escape(str(node.get('cuda_version', '12.8')))}</cuda_version>",
           f"\t<attached_gpus>{len(gpus)}</attached_gpus>"]
    for gpu in gpus:
        f = _fabric_values(gpu)
        bus = gpu["pci"].split(":")
        out += [
            f'\t<gpu id="{escape(gpu["pci"])}">',
            f"\t\t<product_name>{escape(gpu['name'])}</product_name>",
            "\t\t<product_brand>NVIDIA</product_brand>",
            f"\t\t<product_architecture>{escape(gpu.get('architecture', 'N/A'))}"
            "</product_architecture>",
            "\t\t<persistence_mode>Enabled</persistence_mode>",
            f"\t\t<uuid>{escape(gpu['uuid'])}</uuid>",
            f"\t\t<minor_number>{gpu.get('minor', 0)}</minor_number>",
            "\t\t<pci>",
            f"\t\t\t<pci_bus>{bus[1]}</pci_bus>",
            f"\t\t\t<pci_device>{bus[2].split('.')[0]}</pci_device>",
            f"\t\t\t<pci_domain>{bus[0][-4:]}</pci_domain>",
            f"\t\t\t<pci_device_id>{gpu.get('device_id', '0000').upper()}10DE</pci_device_id>",
            f"\t\t\t<pci_bus_id>{escape(gpu['pci'])}</pci_bus_id>",
            "\t\t</pci>",
            "\t\t<fabric>",
            f"\t\t\t<state>{f['state']}</state>",
            f"\t\t\t<status>{escape(f['status'])}</status>",
            f"\t\t\t<cliqueId>{f['clique']}</cliqueId>",
            f"\t\t\t<clusterUuid>{escape(f['cluster'])}</clusterUuid>",
            "\t\t\t<health>",
            f"\t\t\t\t<summary>{escape(f['summary'])}</summary>",
            f"\t\t\t\t<bandwidth>{f['bandwidth']}</bandwidth>",
            f"\t\t\t\t<route_recovery_in_progress>{f['flag']}</route_recovery_in_progress>",
            f"\t\t\t\t<route_unhealthy>{f['flag']}</route_unhealthy>",
            f"\t\t\t\t<access_timeout_recovery>{f['flag']}</access_timeout_recovery>",
            "\t\t\t\t<incorrect_configuration>N/A</incorrect_configuration>",
            "\t\t\t\t<partition_assigned>N/A</partition_assigned>",
            "\t\t\t</health>",
            "\t\t</fabric>",
            "\t\t<processes>",
            "\t\t</processes>",
            "\t</gpu>",
        ]
    out += ["", "</nvidia_smi_log>"]
    return "\n".join(out)


_CSV_FIELDS: dict[str, Callable[[int, dict[str, Any], str], str]] = {
    "index": lambda i, g, d: str(i),
    "name": lambda i, g, d: str(g["name"]),
    "uuid": lambda i, g, d: str(g["uuid"]),
    "gpu_uuid": lambda i, g, d: str(g["uuid"]),
    "pci.bus_id": lambda i, g, d: str(g["pci"]),
    "driver_version": lambda i, g, d: d,
    "fabric.state": lambda i, g, d: _fabric_values(g)["state"],
    "fabric.status": lambda i, g, d: _fabric_values(g)["status"],
    "fabric.cliqueId": lambda i, g, d: _fabric_values(g)["clique"],
    "fabric.clusterUuid": lambda i, g, d: _fabric_values(g)["cluster"],
}


def _smi_csv(gpus: list[dict[str, Any]], node: dict[str, Any], driver: str, query: str,
             fmt: str) -> int:
    fields = [f.strip() for f in query.split(",") if f.strip()]
    for name in fields:
        if name not in _CSV_FIELDS:
            say(f'Field "{name}" is not a valid field to query.')
            say("")
            return 2
    if "noheader" not in fmt.split(","):
        say(", ".join(fields))
    for i, gpu in enumerate(gpus):
        say(", ".join(_CSV_FIELDS[name](i, gpu, driver) for name in fields))
    return 0
