"""The hints of ``plan``, run's preflight and bring-up and the IMEX channel rules typed for
the node asked about (nvfabric.model.commandline.HintContext): for the node itself each reads
as before (no --root, no "on the host whose root"); for another root every nvfabric command
carries that --root, every command that acts on the running kernel or on the machine's PCI
bus says it is typed on the host whose root it is, and every host path lies under the root.
The field report: ``plan --root R`` told a B200 tray's operator to write the host's
/etc/modules-load.d, run's preflight to ``nvfabric fetch`` without --root, and to run again
with ``--gpu-reset-command 'nvidia-smi -r'``, which is looked up on this machine, not in R."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.facts.fs import node_program
from nvfabric.model.commandline import HintContext
from nvfabric.model.inventory import IbDevice, PciFunction
from nvfabric.rules import plan as plan_rules
from nvfabric.rules import preflight as pre
from nvfabric.rules.imex import channels
from nvfabric.rules.nodefacts import RunningService, VersionRead
from nvfabric.rules.plan import ManagementPort, plan
from nvfabric.rules.preflight import Process
from nvfabric.simulate.fakes import set_faults
from tests.cli.test_run_dry_checks import registered
from tests.conftest import run_cli, run_json
from tests.rules.test_plan import cx7, gpu, inventory, port
from tests.runkit import sim

ROOT = "/tmp/x"
CASES_DIR = Path(__file__).parents[1] / "data/cases"
ON_HOST = f" on the host whose root {ROOT} is"

#: Commands that act on the running kernel, its PCI bus or its devices: typed on the host.
HOST = {"modprobe", "dmesg", "nvidia-smi", "lspci", "ibstat", "update-initramfs", "dracut"}
#: Commands that act on files: every path they name lies under the root.
FILES = {"printf", "echo", "cat", "rm", "chmod"}
#: Backquoted words that are no commands.
NAMES = {"ib_umad"}

H100, B200, NVSWITCH3 = 0x2330, 0x2901, 0x22A3


def _switches(n: int) -> list[PciFunction]:
    return [PciFunction(f"0000:{0xc0 + i:02x}:00.0", 0x10DE, NVSWITCH3, 0x068000)
            for i in range(n)]


def _plan_hints(inv_args: dict, *codes: str) -> Callable[[HintContext], list[str]]:
    def hints(ctx: HintContext) -> list[str]:
        p = plan(inventory(**inv_args), ctx)
        found = {f.code: f.hint for f in (*p.blockers, *p.findings)}
        assert set(codes) <= set(found), found
        return [found[c] for c in codes]
    return hints


LPF_NO_IB = {"pci": gpu(B200, 8) + [cx7("0000:05:00.0")],
             "modules": frozenset({"nvidia", "mlx5_core"})}
LPF_NO_UMAD = {"pci": gpu(B200, 8) + [cx7("0000:05:00.0")],
               "ib": [IbDevice("mlx5_0", "0000:05:00.0", (port(1, "0x1"),))],
               "modules": frozenset({"nvidia", "mlx5_core", "mlx5_ib"})}
LPF_SM_OFF = {"pci": gpu(B200, 8) + [cx7("0000:05:00.0")],
              "ib": [IbDevice("mlx5_0", "0000:05:00.0", (port(1, "0x1", 0xA751EC4A),))]}
CHANNEL_FACTS = channels.ChannelFacts(
    234, caps=(channels.DevNode("/dev/nvidia-caps/nvidia-cap9", "char", 234, 9, 0o444),),
    params={"CreateImexChannel0": "0"})
PERM_FACTS = channels.ChannelFacts(234, nodes=(channels.DevNode(
    "/dev/nvidia-caps-imex-channels/channel0", "char", 234, 0, 0o600),))


def _port_unverified(ctx: HintContext) -> str:
    return plan_rules._port_unverified(ManagementPort("mlx5_1", 1, "0x2"), ["mlx5_0 port 1"],
                                       [], ctx).hint


def _smi(ctx: HintContext) -> str:
    return node_program(ctx.root, "nvidia-smi")


#: Every hint of the kind: name -> the hints of that finding for a context.
CASES: dict[str, Callable[[HintContext], list[str]]] = {
    "plan ib_stack_missing": _plan_hints(LPF_NO_IB, "ib_stack_missing"),
    "plan missing_kernel_module (ib_umad)": _plan_hints(LPF_NO_UMAD, "missing_kernel_module"),
    "plan management_port_not_found (SM disabled)": _plan_hints(
        LPF_SM_OFF, "management_port_not_found"),
    "plan management_port_not_found (no LPF)": _plan_hints(
        {"pci": gpu(B200, 8)}, "management_port_not_found"),
    "plan driver_not_loaded": _plan_hints(
        {"pci": gpu(H100, 8) + _switches(4), "driver": None, "modules": frozenset()},
        "driver_not_loaded"),
    "plan sxm_gpus_without_nvswitch": _plan_hints({"pci": gpu(H100, 8)},
                                                  "sxm_gpus_without_nvswitch"),
    "plan nvswitch_topology_mismatch": _plan_hints({"pci": gpu(H100, 8) + _switches(2)},
                                                   "nvswitch_topology_mismatch"),
    "plan baseboard_mixed": _plan_hints({"pci": gpu(H100, 4) + gpu(B200, 4, 0x40)},
                                        "baseboard_mixed"),
    "plan management_port_unverified": lambda ctx: [_port_unverified(ctx)],
    "preflight nvlsm_missing": lambda ctx: [pre.binary_missing(
        Process("nvlsm", "/opt/nvidia/nvlsm/sbin/nvlsm"), "570.148.08", ctx).hint],
    "preflight version_mismatch": lambda ctx: [f.hint for f in pre.fm_version(
        "/usr/bin/nv-fabricmanager", "570.148.08", VersionRead("570.133.20"), ctx)],
    "preflight fabric_service_running": lambda ctx: [f.hint for f in pre.service_running(
        [RunningService("fabricmanager", 42, "pid file")], ["fabricmanager"], ctx.root)],
    "preflight restart_needs_gpu_reset": lambda ctx: [pre.registered(
        "8 GPUs: completed x8", None, hints=ctx, smi=_smi(ctx)).hint],
    "preflight restart_needs_gpu_reset (state unreadable)": lambda ctx: [pre.registered(
        "fabric state unreadable", None, why="NVML: not found", hints=ctx,
        smi=_smi(ctx)).hint],
    "preflight restart_needs_gpu_reset (reset program missing)": lambda ctx: [
        pre.reset_missing(("nvidia-smi", "-r"), registered, ctx, _smi(ctx)).hint
        for registered in (True, False)],
    "imex channel0 missing": lambda ctx: [f.hint for f in channels.check(
        CHANNEL_FACTS, (0,), ctx)],
    "imex channel1 missing": lambda ctx: [channels.fixes(1, 234, ctx)],
    "imex channel permissions": lambda ctx: [f.hint for f in channels.check(
        PERM_FACTS, (0,), ctx)],
}


def _paths(text: str) -> list[str]:
    """The absolute paths written in ``text`` (not ``B200/B300`` or ``0x0680``)."""
    return re.findall(r"(?<![\w.:/<-])/[\w.-][\w./*-]*", text)


def _typed_on_another_root(name: str, text: str) -> None:
    for m in re.finditer(r"`([^`]*)`", text):
        argv = shlex.split(m.group(1).split(">")[0])
        word = argv[0]
        if word == "nvfabric":
            assert argv[argv.index("--root") + 1] == ROOT, (name, text)
        elif word in HOST:  # said after it: `modprobe X` on the host whose root R is
            assert ON_HOST in text[m.end():], (name, m.group(1), text)
        else:
            assert word in FILES or m.group(1) in NAMES, (name, m.group(1))
    bare = re.sub(r"`nvfabric [^`]*`", "", text)
    assert all(p == ROOT or p.startswith(ROOT + "/") for p in _paths(bare)), (name, text)


@pytest.mark.parametrize("name", list(CASES))
def test_each_hint_is_typed_for_another_root(name: str) -> None:
    for text in CASES[name](HintContext(ROOT)):
        _typed_on_another_root(name, text)


@pytest.mark.parametrize("name", list(CASES))
def test_each_hint_on_the_node_itself_names_no_root(name: str) -> None:
    for text in CASES[name](HintContext()):
        assert "--root" not in text and "on the host whose root" not in text, (name, text)
        assert ROOT not in text


def test_on_the_node_itself_the_hints_read_as_before() -> None:
    (ib,) = CASES["plan ib_stack_missing"](HintContext())
    assert ib == ("load the InfiniBand stack: `modprobe mlx5_ib ib_umad`, and make it "
                  "persistent with `printf 'mlx5_ib\\nib_umad\\n' > "
                  "/etc/modules-load.d/nvlink5.conf`")
    (mismatch,) = CASES["preflight version_mismatch"](HintContext())
    assert mismatch.endswith("`nvfabric fetch` resolves it")
    (reset,) = CASES["preflight restart_needs_gpu_reset"](HintContext())
    assert "`nvfabric run --gpu-reset-command 'nvidia-smi -r'`" in reset
    (channel0,) = CASES["imex channel0 missing"](HintContext())[:1]
    assert ("`echo 'options nvidia NVreg_CreateImexChannel0=1' > "
            "/etc/modprobe.d/nvidia-imex.conf`") in channel0


def test_another_root_writes_under_it_and_modprobes_on_its_host() -> None:
    (ib,) = CASES["plan ib_stack_missing"](HintContext(ROOT))
    assert f"`modprobe mlx5_ib ib_umad`{ON_HOST}" in ib
    assert f"> {ROOT}/etc/modules-load.d/nvlink5.conf`" in ib
    channel0 = CASES["imex channel0 missing"](HintContext(ROOT))[0]
    assert f"> {ROOT}/etc/modprobe.d/nvidia-imex.conf`" in channel0


def test_plan_and_run_type_their_hints_for_the_root(tmp_path: Path) -> None:
    """End to end on simulated nodes: ``plan --root`` of a B200 without the IB stack (case
    P05), and run's preflight of a fabric manager of another version than the driver."""
    b200 = tmp_path / "b200"
    done = run_cli("simulate", "--spec", str(CASES_DIR / "P05-b200-ib-stack-missing.yaml"),
                   str(b200))
    assert done.returncode == 0, done.stderr
    out, rc = run_json("plan", "--root", str(b200))
    assert rc == 1, out
    (ib,) = [b["hint"] for b in out["blockers"] if b["code"] == "ib_stack_missing"]
    assert f"> {b200}/etc/modules-load.d/nvlink5.conf`" in ib
    assert f"on the host whose root {b200} is" in ib

    dgx = sim(tmp_path, "dgx-b200", name="dgx")
    set_faults(str(dgx), {"fabricmanager": {"version": "570.133.20"}})
    out, rc = run_json("run", "--dry-run", "--root", str(dgx))
    assert rc == 1, out
    (fetch,) = [f["hint"] for f in out["findings"] if f["code"] == "version_mismatch"]
    assert f"`nvfabric fetch --root {dgx}`" in fetch


def test_the_reset_hint_typed_as_printed_passes_the_preflight(tmp_path: Path) -> None:
    """GPUs registered by an earlier run: the hint's run, typed as printed, resets them with
    the tree's own nvidia-smi (the reset program is looked up on this machine)."""
    hgx = sim(tmp_path, "hgx-h100")
    registered(hgx)
    out, rc = run_json("run", "--dry-run", "--root", str(hgx))
    assert rc == 1, out
    (hint,) = [f["hint"] for f in out["findings"] if f["code"] == "restart_needs_gpu_reset"]
    found = re.search(r"`(nvfabric run [^`]*)`", hint)
    assert found is not None, hint
    typed = shlex.split(found.group(1))
    assert typed[1:4] == ["run", "--root", str(hgx)]
    assert typed[-2:] == ["--gpu-reset-command", f"{hgx}/usr/bin/nvidia-smi -r"]
    again, rc = run_json(*typed[1:], "--dry-run")
    assert rc == 0, again
    (reset,) = [f for f in again["findings"] if f["code"] == "restart_needs_gpu_reset"]
    assert reset["severity"] == "info"
