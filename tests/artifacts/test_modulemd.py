"""dnf module streams of an RPM repository (F07): repomd.xml lists ``modules``, a
modules.yaml.gz of modulemd v2 documents shaped as NVIDIA's genmodules.py writes them
(NVIDIA/yum-packaging-precompiled-kmod); the pin lines enable the stream that holds the
package, install the versionlock plugin, then install and lock the exact version."""

from __future__ import annotations

import pytest

from nvfabric.artifacts import modulemd, rpm
from nvfabric.artifacts.model import Artifact, Request
from nvfabric.artifacts.resolve import resolve
from nvfabric.artifacts.transport import Transport
from nvfabric.model.errors import NvfabricError
from nvfabric.model.strict import load_yaml_all
from tests.artifacts.test_rpm import pkg
from tests.cli.test_fetch_mirror import (  # noqa: F401 - fixture
    FAST,
    Mirror,
    gz,
    mirror,
    no_sleep,
    primary_xml,
    sha256,
)


def stream_doc(stream: str, rpms: list[str], name: str = "nvidia-driver") -> str:
    """One modulemd v2 document as genmodules.py writes it (``...`` / ``---`` between)."""
    lines = "\n".join(f"            - {r}" for r in rpms)
    return (f"document: modulemd\nversion: 2\ndata:\n    name: {name}\n    stream: {stream}\n"
            "    version: 20250214101010\n    arch: x86_64\n"
            f"    summary: Nvidia driver for {stream} branch\n"
            "    description: >-\n        This package provides the most recent NVIDIA display"
            "\n        driver.\n    license:\n        module:\n            - MIT\n"
            "    profiles:\n        default:\n            description: Default installation\n"
            "            rpms:\n                - nvidia-driver\n"
            f"    artifacts:\n        rpms:\n{lines}\n")


DEFAULTS = ("document: modulemd-defaults\nversion: 1\ndata:\n    module: nvidia-driver\n"
            "    stream: latest\n    profiles:\n        latest: [default]\n")

FM_570 = "nvidia-fabric-manager-0:570.172.08-1.el9.x86_64"
FM_580 = "nvidia-fabricmanager-0:580.95.05-1.x86_64"


def modules_yaml(*docs: str) -> bytes:
    return ("...\n---\n".join(docs) + "...\n").encode()


MODULES = modules_yaml(
    stream_doc("latest", [FM_580]),
    stream_doc("latest-dkms", [FM_580, "dkms-nvidia-3:580.95.05-1.x86_64"]),
    stream_doc("580", [FM_580]), stream_doc("580-dkms", [FM_580]),
    stream_doc("580-open", [FM_580]),
    stream_doc("570", [FM_570]), stream_doc("570-dkms", [FM_570]),
    DEFAULTS)


def serve(m: Mirror, modules: bytes | None, modules_checksum: str | None = None) -> None:
    """primary.xml.gz (and modules.yaml.gz when given), both listed in repomd.xml."""
    primary = gz(primary_xml([pkg("nvidia-fabric-manager", "570.172.08", "1.el9"),
                              pkg("nvidia-fabricmanager", "580.95.05"),
                              pkg("nvidia-fabricmanager", "590.48.01")]))
    m.add("repodata/p-primary.xml.gz", primary)
    data = [("primary", "repodata/p-primary.xml.gz", primary, None)]
    if modules is not None:
        body = gz(modules)
        m.add("repodata/m-modules.yaml.gz", body)
        data.append(("modules", "repodata/m-modules.yaml.gz", body, modules_checksum))
    entries = "".join(
        f'<data type="{kind}"><checksum type="sha256">{chk or sha256(body)}</checksum>'
        f'<location href="{href}"/><size>{len(body)}</size></data>'
        for kind, href, body, chk in data)
    m.add("repodata/repomd.xml", (
        '<?xml version="1.0" encoding="UTF-8"?>\n<repomd xmlns="http://linux.duke.edu/metadata/'
        f'repo"><revision>1</revision>{entries}</repomd>\n').encode())


def resolve_fm(m: Mirror, driver: str) -> list[Artifact]:
    with Transport(FAST, mirror=m.url, sleep=no_sleep) as t:
        return list(resolve(Request(driver, "x86_64", ("fabricmanager",), "rpm"), t,
                            m.url).artifacts)


def test_parse_reads_every_stream_and_skips_the_defaults_document() -> None:
    streams = modulemd.parse(MODULES, "modules.yaml")
    assert [s.spec for s in streams] == [
        "nvidia-driver:latest", "nvidia-driver:latest-dkms", "nvidia-driver:580",
        "nvidia-driver:580-dkms", "nvidia-driver:580-open", "nvidia-driver:570",
        "nvidia-driver:570-dkms"]
    assert FM_570 in streams[-1].rpms


@pytest.mark.parametrize(("driver", "evr", "name", "stream"), [
    ("580.95.05", "580.95.05-1", "nvidia-fabricmanager", "580-dkms"),  # NVIDIA's scripts' pick
    ("570.172.08", "570.172.08-1.el9", "nvidia-fabric-manager", "570-dkms"),
])
def test_the_branch_dkms_stream_is_chosen_over_latest(driver: str, evr: str, name: str,
                                                      stream: str) -> None:
    streams = modulemd.parse(MODULES, "m")
    chosen = modulemd.stream_for(streams, name, evr, "x86_64", driver.split(".")[0])
    assert chosen is not None and chosen.stream == stream


def test_without_a_dkms_stream_another_of_the_branch_then_latest() -> None:
    only = modulemd.parse(modules_yaml(stream_doc("latest", [FM_580]),
                                       stream_doc("580-open", [FM_580]),
                                       stream_doc("580", [FM_580])), "m")
    pick = modulemd.stream_for(only, "nvidia-fabricmanager", "580.95.05-1", "x86_64", "580")
    assert pick is not None and pick.stream == "580"
    latest = modulemd.parse(modules_yaml(stream_doc("latest-dkms", [FM_580])), "m")
    pick = modulemd.stream_for(latest, "nvidia-fabricmanager", "580.95.05-1", "x86_64", "580")
    assert pick is not None and pick.stream == "latest-dkms"
    assert modulemd.stream_for(latest, "nvidia-imex", "580.95.05-1", "x86_64", "580") is None


def test_nevras_with_and_without_an_epoch_are_the_same_package() -> None:
    streams = modulemd.parse(modules_yaml(stream_doc(
        "575-dkms", ["nvidia-imex-575-575.57.08-1.el9.aarch64",
                     "nvidia-fabricmanager-1:575.57.08-1.el9.x86_64"])), "m")
    assert modulemd.stream_for(streams, "nvidia-imex-575", "575.57.08-1.el9", "aarch64",
                               "575") is not None
    assert modulemd.stream_for(streams, "nvidia-fabricmanager", "1:575.57.08-1.el9", "x86_64",
                               "575") is not None
    assert modulemd.stream_for(streams, "nvidia-fabricmanager", "575.57.08-1.el9", "x86_64",
                               "575") is None  # epoch 0 is another package than epoch 1


def test_an_unquoted_numeric_stream_is_its_name() -> None:
    (s,) = modulemd.parse(b"document: modulemd\nversion: 2\ndata:\n  name: nvidia-driver\n"
                          b"  stream: 570\n  artifacts:\n    rpms: []\n", "m")
    assert s.spec == "nvidia-driver:570"


@pytest.mark.parametrize(("text", "why"), [
    (b"document: modulemd\nversion: 2\ndata: [1]\n", "without a data mapping"),
    (b"document: modulemd\ndata:\n  name: nvidia-driver\n", "without a stream"),
    (b"document: modulemd\ndata:\n  name: 'a b; rm'\n  stream: x\n", "not a plain word"),
    (b"document: modulemd\ndata:\n  name: n\n  stream: s\n  artifacts:\n    rpms: {a: 1}\n",
     "not a list of NEVRAs"),
    (b"document: modulemd\ndata: {name: n, stream: [\n", "not YAML"),
    (b"\xff\xfe", "not UTF-8"),
], ids=["data-list", "no-stream", "shell-name", "rpms-map", "bad-yaml", "not-utf8"])
def test_damaged_module_metadata_is_refused_naming_it(text: bytes, why: str) -> None:
    with pytest.raises(NvfabricError) as err:
        modulemd.parse(text, "https://m/repodata/modules.yaml.gz")
    assert err.value.exit_code == 2 and err.value.finding.code == "input_unreadable"
    assert why in err.value.finding.message
    assert "modules.yaml.gz" in err.value.finding.message


def test_an_alias_bomb_across_documents_is_refused_by_the_node_budget() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
    with pytest.raises(NvfabricError, match="more than 50 YAML nodes"):
        load_yaml_all("---\n" + bomb + "---\n" + bomb, "m", max_nodes=50)
    assert load_yaml_all("--- 1\n--- [2]\n...\n", "m") == [1, [2]]
    assert load_yaml_all("", "m") == []


def test_resolve_records_the_stream_and_the_pins_enable_it_first(mirror: Mirror) -> None:  # noqa: F811
    serve(mirror, MODULES)
    [fm] = resolve_fm(mirror, "570.172.08")
    assert (fm.version, fm.module_stream) == ("570.172.08-1.el9", "nvidia-driver:570-dkms")
    assert fm.to_json()["module_stream"] == "nvidia-driver:570-dkms"
    assert rpm.pin_lines([fm], "rhel9") == [
        "dnf module enable -y nvidia-driver:570-dkms",
        "dnf install -y 'dnf-command(versionlock)'",
        "dnf install -y nvidia-fabric-manager-570.172.08-1.el9",
        "dnf versionlock add nvidia-fabric-manager-570.172.08-1.el9"]
    assert rpm.commands([fm], "rhel9")[1] == ["dnf", "install", "-y", "dnf-command(versionlock)"]


def test_a_package_outside_every_module_needs_no_enable_line(mirror: Mirror) -> None:  # noqa: F811
    serve(mirror, modules_yaml(stream_doc("580-dkms", [FM_580])))
    [fm] = resolve_fm(mirror, "590.48.01")
    assert fm.module_stream is None
    assert not any("module enable" in line for line in rpm.pin_lines([fm], "rhel9"))


def test_yum_has_no_modules_and_zypper_no_plugin() -> None:
    art = Artifact("fabricmanager", "580.95.05-1.el7", "x86_64", "https://x/y.rpm",
                       "0" * 64, None, "rpm", "nvidia-fabricmanager",
                       module_stream="nvidia-driver:580-dkms")
    assert rpm.commands([art], "rhel7")[0] == ["yum", "install", "-y", "yum-plugin-versionlock"]
    assert [a[:2] for a in rpm.commands([art], "sles15")] == [
        ["zypper", "--non-interactive"], ["zypper", "addlock"]]


def test_module_metadata_with_a_wrong_checksum_is_refused(mirror: Mirror) -> None:  # noqa: F811
    serve(mirror, MODULES, modules_checksum="0" * 64)
    with pytest.raises(NvfabricError) as err:
        resolve_fm(mirror, "580.95.05")
    assert err.value.finding.code == "checksum_mismatch"
    assert "modules.yaml.gz" in err.value.finding.message


def test_module_metadata_repomd_names_but_the_mirror_lacks_is_not_available(
        mirror: Mirror) -> None:  # noqa: F811
    serve(mirror, MODULES)
    del mirror.routes["/repodata/m-modules.yaml.gz"]
    with pytest.raises(NvfabricError) as err:
        resolve_fm(mirror, "580.95.05")
    assert err.value.finding.code == "artifact_not_available"
    assert "m-modules.yaml.gz, which is missing" in err.value.finding.message


def test_fetch_cli_prints_the_lines_in_order(mirror: Mirror) -> None:  # noqa: F811
    from tests.conftest import run_json

    serve(mirror, MODULES)
    out, rc = run_json("fetch", "--source", "rpm", "--driver-version", "580.95.05", "--arch",
                       "x86_64", "--components", "fabricmanager", "--mirror", mirror.url,
                       "--distro", "rhel8", "--dry-run", "--retries", "0")
    assert rc == 0, out
    assert out["pins"][:2] == ["dnf module enable -y nvidia-driver:580-dkms",
                               "dnf install -y 'dnf-command(versionlock)'"]
    assert out["artifacts"][0]["module_stream"] == "nvidia-driver:580-dkms"
    assert out["sources_searched"][-1].endswith("repodata/m-modules.yaml.gz")
    out, rc = run_json("install", "--source", "rpm", "--driver-version", "580.95.05", "--arch",
                       "x86_64", "--components", "fabricmanager", "--mirror", mirror.url,
                       "--distro", "rhel8", "--dry-run", "--retries", "0")
    assert rc == 0 and out["commands"][0] == [
        "dnf", "module", "enable", "-y", "nvidia-driver:580-dkms"]
