"""Redist manifests: the real ones of tests/data/corpus/redist and manifests made in the test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nvfabric.artifacts import redist
from nvfabric.artifacts.model import Request
from nvfabric.model.errors import NvfabricError
from tests.cases import CORPUS

REDIST = CORPUS / "redist"
BASE = "https://mirror.invalid/redist"


def corpus_manifest(cuda: str) -> tuple[redist.Manifest, dict[str, Any]]:
    path = next(REDIST.glob(f"cuda-redistrib_{cuda}-*.json"))
    data = path.read_bytes()
    return redist.parse_manifest(data, str(path)), json.loads(data)


def resolve(manifest: redist.Manifest, driver: str, arch: str, *components: str) -> list[Any]:
    return redist.resolve(manifest, "M", BASE, Request(driver, arch, components))


def test_r590_imex_archive_name_comes_from_the_manifest() -> None:
    manifest, raw = corpus_manifest("13.1.1")
    [imex] = resolve(manifest, "590.48.01", "aarch64", "imex")
    assert imex.url == f"{BASE}/imex/linux-sbsa/imex-linux-sbsa-590.48.01-archive.tar.xz"
    assert imex.sha256 == raw["imex"]["linux-sbsa"]["sha256"]
    assert imex.size == int(raw["imex"]["linux-sbsa"]["size"])
    assert imex.arch == "sbsa"


def test_r580_imex_archive_keeps_the_nvidia_prefix() -> None:
    manifest, _ = corpus_manifest("13.0.2")
    [imex] = resolve(manifest, "580.95.05", "x86_64", "imex")
    assert imex.url.endswith("imex/linux-x86_64/nvidia-imex-linux-x86_64-580.95.05-archive.tar.xz")


def test_nvlsm_takes_the_calendar_version_of_the_same_release() -> None:
    for cuda, driver, nvlsm in (("13.0.2", "580.95.05", "2025.06.6"),
                                ("13.1.1", "590.48.01", "2025.06.10")):
        manifest, _ = corpus_manifest(cuda)
        arts = resolve(manifest, driver, "x86_64", "fabricmanager", "nvlsm", "libnvsdm",
                       "libnvidia_nscq")
        assert [(a.component, a.version) for a in arts] == [
            ("fabricmanager", driver), ("nvlsm", nvlsm), ("libnvsdm", driver),
            ("libnvidia_nscq", driver)]


def test_nvlsm_is_refused_from_another_releases_manifest() -> None:
    manifest, _ = corpus_manifest("13.0.2")
    with pytest.raises(NvfabricError) as err:
        resolve(manifest, "590.48.01", "x86_64", "nvlsm")
    assert err.value.finding.code == "artifact_not_available"
    assert "not the one of driver 590.48.01" in err.value.finding.message


def test_r570_manifest_has_no_nvlsm() -> None:
    manifest, _ = corpus_manifest("12.8.2")
    with pytest.raises(NvfabricError) as err:
        resolve(manifest, "570.211.01", "x86_64", "nvlsm")
    assert err.value.finding.fields["component"] == "nvlsm"
    assert err.value.finding.fields["sources_searched"] == ["M"]


@pytest.mark.parametrize("driver", ["580.95.06", "580.95.5.1", "580.95", "581.95.05"])
def test_never_the_nearest_version(driver: str) -> None:
    manifest, _ = corpus_manifest("13.0.2")
    with pytest.raises(NvfabricError) as err:
        resolve(manifest, driver, "x86_64", "fabricmanager")
    finding = err.value.finding
    assert finding.code == "artifact_not_available"
    assert finding.fields["version"] == driver
    assert "carries fabricmanager 580.95.05" in finding.message
    assert err.value.exit_code == 1


def test_same_version_with_other_zero_padding_keeps_the_published_spelling() -> None:
    manifest, _ = corpus_manifest("13.0.2")
    [fm] = resolve(manifest, "580.95.5", "x86_64", "fabricmanager")
    assert fm.version == "580.95.05"


def test_libnvsdm_on_sbsa_names_component_platform_and_manifest() -> None:
    manifest, _ = corpus_manifest("13.1.1")
    with pytest.raises(NvfabricError) as err:
        redist.resolve(manifest, "https://m/redistrib_590.48.01.json", BASE,
                       Request("590.48.01", "arm64", ("libnvsdm",)))
    f = err.value.finding
    assert (f.fields["component"], f.fields["platform"]) == ("libnvsdm", "linux-sbsa")
    assert "https://m/redistrib_590.48.01.json" in f.message
    assert "x86_64 only" in f.message


def test_unsafe_relative_paths_are_dropped_not_followed(tmp_path: Path) -> None:
    manifest, raw = corpus_manifest("13.0.2")
    raw["fabricmanager"]["linux-x86_64"]["relative_path"] = "../../etc/passwd"
    raw["imex"]["linux-x86_64"]["relative_path"] = "/abs/imex.tar.xz"
    raw["libnvidia_nscq"]["linux-x86_64"]["sha256"] = "not-a-digest"
    parsed = redist.parse_manifest(json.dumps(raw).encode(), "M")
    assert len(parsed.problems) == 3
    for comp in ("fabricmanager", "imex", "libnvidia_nscq"):
        with pytest.raises(NvfabricError) as err:
            resolve(parsed, "580.95.05", "x86_64", comp)
        assert "malformed" in err.value.finding.message


@pytest.mark.parametrize("body", [b"<html>not json</html>", b"[1, 2]", b"\xff\xfe"])
def test_a_damaged_manifest_is_one_clear_error(body: bytes) -> None:
    with pytest.raises(NvfabricError) as err:
        redist.parse_manifest(body, "https://m/redistrib_1.2.3.json")
    assert err.value.finding.code == "input_unreadable"
    assert "https://m/redistrib_1.2.3.json" in err.value.finding.message
