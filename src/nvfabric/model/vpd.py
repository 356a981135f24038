"""A decoded PCI Vital Product Data image (PCI Local Bus Specification 3.0, section 6.4):
keyword fields, the identifier string, the checksum verdict, and the Mellanox vendor field of
ConnectX LPFs (``MLX:...:SMDL=SW_MNG:...``; source: tests/data/corpus/lspci/
dgxb200-cx7-sw_mng-lspci-vvv.txt). Values only: :func:`nvfabric.facts.vpd.decode` makes them
from bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

_PLAIN = bytes(range(0x20, 0x7F)).replace(b"\\", b"")


def printable(data: bytes) -> str:
    """A VPD value as lspci prints text: NULs dropped, control bytes as ``\\xNN``."""
    if not data.translate(None, _PLAIN):
        return data.decode("ascii")  # the common case: plain printable ASCII
    out = []
    for ch in data:
        if ch == 0:
            continue
        if ch < 32 or ch == 127:
            out.append(f"\\x{ch:02x}")
        elif ch == 0x5C:
            out.append("\\\\")
        else:
            out.append(chr(ch))
    return "".join(out)


@dataclass(frozen=True)
class VpdField:
    """One keyword field: ``section`` is ``R`` (VPD-R) or ``W`` (VPD-W)."""

    section: str
    keyword: str
    value: bytes

    @property
    def text(self) -> str:
        return printable(self.value)


@dataclass(frozen=True)
class Vpd:
    """A decoded VPD image.

    ``id_string`` None when the image has no identifier item; ``checksum_ok`` None when there
    is no RV field; ``end`` True when the end tag was reached; ``problems`` lists what was wrong
    with the bytes (empty for a clean image).
    """

    id_string: str | None
    fields: tuple[VpdField, ...]
    checksum_ok: bool | None
    end: bool
    problems: tuple[str, ...] = ()

    def get(self, keyword: str) -> str | None:
        """Text of the first field with this keyword, or None."""
        for f in self.fields:
            if f.keyword == keyword:
                return f.text
        return None

    def mellanox_fields(self) -> dict[str, str]:
        """Keys of the Mellanox vendor field (``MLX:K=V:K=V``), {} when there is none."""
        for f in self.fields:
            text = f.text
            if f.keyword.startswith("V") and text.startswith("MLX:"):
                return parse_mellanox_field(text)
        return {}


def parse_mellanox_field(text: str) -> dict[str, str]:
    """``MLX:MN=MLNX:SMDL=SW_MNG`` -> ``{"MN": "MLNX", "SMDL": "SW_MNG"}``.

    Parts without ``=`` (the ``MLX`` prefix) are ignored; a repeated key keeps its first value.
    """
    out: dict[str, str] = {}
    for part in text.split(":"):
        key, sep, value = part.partition("=")
        if sep and key and key not in out:
            out[key.strip()] = value.strip()
    return out
