"""The VPD decoder: real capture, lspci as oracle, malformed bytes, round trips."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvfabric.facts.vpd import decode, encode, keyword_name
from nvfabric.model.vpd import parse_mellanox_field
from tests.cases import CORPUS
from tests.oracles import lspci_vvv, vpd_block

B200_LSPCI = CORPUS / "lspci" / "dgxb200-cx7-sw_mng-lspci-vvv.txt"
FIELD = re.compile(r"\[(..)\] ([^:]+): (.*)")


def lspci_fields(block: list[str]) -> tuple[str | None, list[tuple[str, str, str]], str | None]:
    """(product name, [(keyword, name, value)], checksum verdict) from an lspci VPD block."""
    product = None
    fields = []
    verdict = None
    for line in block:
        if line.startswith("Product Name: "):
            product = line[len("Product Name: "):]
        m = FIELD.fullmatch(line)
        if m:
            kw, name, value = m.groups()
            if kw == "RV":
                verdict = "good" if "checksum good" in value else "bad"
            else:
                fields.append((kw, name, value))
    return product, fields, verdict


def test_dgx_b200_lpf_vpd_matches_the_real_capture_through_lspci(
    node: Callable[..., Path],
) -> None:
    root = node("dgx-b200")
    ours = vpd_block(lspci_vvv(str(root), "05:00.0"))
    real = vpd_block(B200_LSPCI.read_text())
    assert ours == real
    assert real[-1] == "End" and len(real) > 10


@pytest.mark.parametrize(
    ("id_string", "fields", "corrupt"),
    [
        ("Nvidia ConnectX-7 mezz internal for Nvidia Umbriel system",
         [("PN", "692-9X760-00SE-S00"), ("VA", "MLX:MN=MLNX:SMDL=SW_MNG:MODL=C7010Z")], False),
        ("ConnectX-7 HHHL", [("PN", "MCX75310AAS-NEAT"), ("SN", "MT2300X00000"),
                              ("V0", "PCIeGen5 x16"), ("VA", "MLX:MN=MLNX:MODL=CX713106A")], True),
        ("odd \\ chars", [("YA", "asset\\tag"), ("V9", "ctl\x01byte")], False),
    ],
)
def test_decoder_agrees_with_lspci_on_every_field_and_checksum(
    tmp_path: Path, id_string: str, fields: list[tuple[str, str]], corrupt: bool,
) -> None:
    from nvfabric.simulate import build, parse

    root = tmp_path / "n"
    image = encode(id_string, fields, corrupt_checksum=corrupt)
    # the spec's files: replace the function's VPD (bytes, written where the link leads)
    build(parse({"arch": "x86_64", "mellanox": [{"ib_device": "mlx5_0"}],
                 "files": {"sys/bus/pci/devices/0000:05:00.0/vpd": image}}), str(root))
    assert (root / "sys/devices/pci0000:00/0000:05:00.0/vpd").read_bytes() == image
    product, lfields, verdict = lspci_fields(vpd_block(lspci_vvv(str(root), "05:00.0")))
    vpd = decode(image)
    assert product == vpd.id_string
    assert lfields == [(f.keyword, keyword_name(f.keyword), f.text) for f in vpd.fields
                       if f.keyword != "RV"]
    assert verdict == ("bad" if corrupt else "good")
    assert vpd.checksum_ok is (not corrupt)


def test_mellanox_vendor_field_keys() -> None:
    keys = parse_mellanox_field("MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:SMDL=SW_MNG:MODL=C7010Z")
    assert keys == {"MN": "MLNX", "CSKU": "V2", "UUID": "V3", "PCI": "V0", "SMDL": "SW_MNG",
                    "MODL": "C7010Z"}


@pytest.mark.parametrize("keep", [1, 2, 3, 10, 14, 40, -5, -1])
def test_truncated_image_gives_prefix_and_problem(keep: int) -> None:
    image = encode("ConnectX-7", [("PN", "692-9X760-00SE-S00"), ("VA", "MLX:SMDL=SW_MNG")])
    vpd = decode(image[:keep])
    assert vpd.problems
    assert not vpd.end


def test_length_past_end_and_unknown_tag() -> None:
    assert "claims" in decode(b"\x82\xff\x00abc").problems[0]
    vpd = decode(b"\x82\x02\x00hi\xa0\x01\x00x\x78")
    assert vpd.id_string == "hi" and vpd.end and "unknown large item 0xa0" in vpd.problems[0]


def test_bad_checksum_is_reported_not_raised() -> None:
    vpd = decode(encode("x", [("PN", "1")], corrupt_checksum=True))
    assert vpd.checksum_ok is False and vpd.end and vpd.get("PN") == "1"


keywords = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=2, max_size=2).filter(
    lambda k: k != "RV")
values = st.binary(min_size=0, max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80),
       st.lists(st.tuples(keywords, values), max_size=8),
       st.lists(st.tuples(keywords, values), max_size=3))
def test_round_trip(id_string: str, ro: list[tuple[str, bytes]],
                    rw: list[tuple[str, bytes]]) -> None:
    vpd = decode(encode(id_string, ro, rw))
    assert vpd.problems == () and vpd.end and vpd.checksum_ok is True
    assert vpd.id_string == id_string.replace("\\", "\\\\")
    assert [(f.keyword, f.value) for f in vpd.fields if f.section == "R" and f.keyword != "RV"] \
        == ro
    assert [(f.keyword, f.value) for f in vpd.fields if f.section == "W"] == rw


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=600))
def test_decode_never_raises(data: bytes) -> None:
    vpd = decode(data)
    assert isinstance(vpd.problems, tuple)
    vpd.mellanox_fields()
