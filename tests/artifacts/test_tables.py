"""The fact tables and their lookups: architecture names per artifact kind, package names by
branch, CUDA repository distro directories, version comparison."""

from __future__ import annotations

import pytest

from nvfabric.artifacts.naming import arch_name, canonical_arch, distro_dir, package_name
from nvfabric.artifacts.tables import ARCH_NAMES, COMPONENTS, KINDS, PACKAGE_NAMES
from nvfabric.model.versions import at_least, branch, fields, is_version, same


@pytest.mark.parametrize(
    ("kind", "x86", "arm"),
    [("redist", "x86_64", "sbsa"), ("cuda_repo", "x86_64", "sbsa"), ("deb", "amd64", "arm64"),
     ("rpm", "x86_64", "aarch64"), ("run", "x86_64", "aarch64")],
)
@pytest.mark.parametrize("spelling", ["aarch64", "arm64", "ARM64", "sbsa", " aarch64\n"])
def test_every_arm_spelling_maps_to_each_kinds_own_name(
    kind: str, x86: str, arm: str, spelling: str
) -> None:
    assert arch_name(kind, spelling) == arm
    assert arch_name(kind, "amd64") == arch_name(kind, "x86_64") == x86


def test_arch_table_is_complete_and_sourced() -> None:
    for kind in KINDS:
        for arch in ("x86_64", "aarch64"):
            name, source = ARCH_NAMES[(kind, arch)]
            assert name and source
    with pytest.raises(ValueError):
        arch_name("redist", "ppc64le")
    with pytest.raises(ValueError):
        arch_name("wheel", "x86_64")
    assert canonical_arch("riscv64") is None


@pytest.mark.parametrize(
    ("kind", "component", "driver", "name"),
    [
        # F05 / APT580: the branch is in the name before R580, not from R580 on
        ("deb", "fabricmanager", "535.230.02", "nvidia-fabricmanager-535"),
        ("deb", "fabricmanager", "570.172.08", "nvidia-fabricmanager-570"),
        ("deb", "fabricmanager", "580.65.06", "nvidia-fabricmanager"),
        ("deb", "fabricmanager", "590.48.01", "nvidia-fabricmanager"),
        ("deb", "libnvidia_nscq", "550.90.07", "libnvidia-nscq-550"),
        ("deb", "libnvidia_nscq", "580.95.05", "libnvidia-nscq"),
        ("deb", "libnvsdm", "550.90.07", None),
        ("deb", "libnvsdm", "570.148.08", "libnvsdm-570"),
        ("deb", "libnvsdm", "580.65.06", "libnvsdm"),
        ("deb", "imex", "535.183.01", None),
        ("deb", "imex", "570.133.20", "nvidia-imex-570"),
        ("deb", "imex", "580.126.20", "nvidia-imex"),
        ("deb", "nvlsm", "570.148.08", "nvlsm"),
        # RPM: nvidia-fabricmanager-<branch>, then nvidia-fabric-manager (hyphen), then R580
        ("rpm", "fabricmanager", "450.80.02", "nvidia-fabricmanager-450"),
        ("rpm", "fabricmanager", "460.32.03", "nvidia-fabricmanager-460"),
        ("rpm", "fabricmanager", "460.91.03", "nvidia-fabric-manager"),
        ("rpm", "fabricmanager", "535.230.02", "nvidia-fabric-manager"),
        ("rpm", "fabricmanager", "575.57.08", "nvidia-fabric-manager"),
        ("rpm", "fabricmanager", "580.95.05", "nvidia-fabricmanager"),
        ("rpm", "libnvidia_nscq", "570.1.1", "libnvidia-nscq-570"),
        ("rpm", "imex", "590.48.01", "nvidia-imex"),
    ],
)
def test_package_names_by_branch(kind: str, component: str, driver: str, name: str | None) -> None:
    assert package_name(kind, component, driver) == name


def test_every_component_has_a_name_rule_in_both_kinds() -> None:
    for kind in ("deb", "rpm"):
        for comp in COMPONENTS:
            rules = [r for r in PACKAGE_NAMES if r.kind == kind and r.component == comp]
            assert rules and all(r.source for r in rules)
            assert any(r.since == (0,) for r in rules), "every version falls under a rule"


@pytest.mark.parametrize(
    ("os_release", "expected"),
    [
        ({"ID": "ubuntu", "VERSION_ID": "24.04"}, "ubuntu2404"),
        ({"ID": "ubuntu", "VERSION_ID": "22.04"}, "ubuntu2204"),
        ({"ID": "debian", "VERSION_ID": "12"}, "debian12"),
        ({"ID": "rhel", "VERSION_ID": "9.4"}, "rhel9"),
        ({"ID": "rocky", "VERSION_ID": "8.10"}, "rhel8"),
        ({"ID": "sles", "VERSION_ID": "15.5"}, "sles15"),
        ({"ID": "amzn", "VERSION_ID": "2023"}, "amzn2023"),
        ({"ID": "gentoo", "VERSION_ID": "2.15"}, None),
        ({"ID": "ubuntu"}, None),
    ],
)
def test_cuda_repo_distro_from_os_release(os_release: dict[str, str], expected: str | None) -> None:
    assert distro_dir(os_release) == expected


def test_versions_compare_numerically_per_field_and_stay_as_published() -> None:
    assert fields("570.158.01") == (570, 158, 1)
    assert same("570.158.01", "570.158.1")
    assert not same("570.158.01", "570.158.10")
    assert not same("580.95.05", "580.95")
    assert not same("580.95.05", "580.95.05-1"), "a package revision is not a plain version"
    assert same("2025.06.6", "2025.6.6")
    assert is_version("570.00") and not is_version("570") and not is_version("5a0.1.2")
    assert branch("535.230.02") == 535
    with pytest.raises(ValueError):
        branch("latest")
    assert at_least((460, 91, 3), (460, 91)) and not at_least((460, 32, 3), (460, 91))


def test_default_bases_use_each_kinds_names() -> None:
    from nvfabric.artifacts.resolve import repo_base
    from nvfabric.artifacts.tables import CUDA_REPO_BASE, REDIST_BASE

    assert repo_base("apt", "arm64", None, "ubuntu2404") == CUDA_REPO_BASE + "ubuntu2404/sbsa"
    assert repo_base("rpm", "x86_64", None, "rhel9") == CUDA_REPO_BASE + "rhel9/x86_64"
    assert repo_base("redist", "aarch64", None, None) == REDIST_BASE.rstrip("/")
    assert repo_base("apt", "x86_64", "http://127.0.0.1:1/m/", None) == "http://127.0.0.1:1/m"
    assert REDIST_BASE.startswith("https://") and CUDA_REPO_BASE.startswith("https://")
    with pytest.raises(ValueError):
        repo_base("apt", "x86_64", None, None)
