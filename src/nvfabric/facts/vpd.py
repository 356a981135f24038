"""PCI Vital Product Data (VPD) decoder and encoder. Pure: bytes in, values out.

Format (PCI Local Bus Specification 3.0, section 6.4 and appendix I; the same rules lspci
applies in its ls-vpd.c): a sequence of resource items.

- Large item: first byte ``1nnnnnnn`` (item name ``n``), then a 16-bit little-endian length.
  0x82 is the identifier string, 0x90 VPD-R (read-only keywords), 0x91 VPD-W (read-write).
- Small item: first byte ``0nnnnlll`` (name ``n``, length ``l``); 0x78 is the end tag.
- Inside VPD-R/VPD-W: keyword fields of a 2-character keyword, a 1-byte length and the data.
  The ``RV`` field's first byte is a checksum: the sum of every byte from the start of the VPD
  up to and including it is 0 modulo 256 ("checksum good" in lspci), the rest is reserved.

ConnectX LPFs of NVLink 5 baseboards carry a Mellanox vendor field such as
``MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:SMDL=SW_MNG:MODL=C7010Z`` in ``[VA]`` (source:
tests/data/corpus/lspci/dgxb200-cx7-sw_mng-lspci-vvv.txt); :meth:`Vpd.mellanox_fields` parses it.

:func:`decode` never raises: truncated images, lengths past the end and unknown tags give the
decoded prefix and a description in ``problems``.
"""

from __future__ import annotations

from collections.abc import Iterable

from nvfabric.model.vpd import Vpd, VpdField, printable

TAG_ID_STRING = 0x82
TAG_VPD_R = 0x90
TAG_VPD_W = 0x91
TAG_END = 0x78

#: Keyword names as lspci prints them (pciutils ls-vpd.c); ``V*`` and ``Y*`` are families.
KEYWORD_NAMES: dict[str, str] = {
    "PN": "Part number",
    "EC": "Engineering changes",
    "FG": "Fabric geography",
    "LC": "Location",
    "MN": "Manufacture ID",
    "PG": "PCI geography",
    "SN": "Serial number",
    "CP": "Extended capability",
    "RV": "Reserved",
    "YA": "Asset tag",
    "RW": "Read-write area",
}


def keyword_name(keyword: str) -> str:
    """Human name of a VPD keyword as lspci prints it (``V3`` -> ``Vendor specific``)."""
    if keyword in KEYWORD_NAMES:
        return KEYWORD_NAMES[keyword]
    if keyword[:1] == "V":
        return "Vendor specific"
    if keyword[:1] == "Y":
        return "System specific"
    return "Unknown"


def decode(data: bytes) -> Vpd:
    """Decode a VPD image. Never raises; see the module docstring for the format."""
    id_string: str | None = None
    fields: list[VpdField] = []
    problems: list[str] = []
    checksum_ok: bool | None = None
    end = False
    pos = 0
    n = len(data)
    while pos < n:
        tag = data[pos]
        if tag & 0x80:
            if pos + 3 > n:
                problems.append(f"truncated large item header at offset {pos}")
                break
            length = data[pos + 1] | (data[pos + 2] << 8)
            start = pos + 3
            stop = start + length
            if stop > n:
                problems.append(
                    f"item 0x{tag:02x} at offset {pos} claims {length} bytes, {n - start} left"
                )
                stop = n
            body = data[start:stop]
            if tag == TAG_ID_STRING:
                id_string = printable(body)
            elif tag in (TAG_VPD_R, TAG_VPD_W):
                section = "R" if tag == TAG_VPD_R else "W"
                ok = _decode_keywords(data, start, stop, section, fields, problems)
                if ok is not None:
                    checksum_ok = ok
            else:
                problems.append(f"unknown large item 0x{tag:02x} at offset {pos}")
            if stop - start < length:
                break
            pos = stop
        else:
            if tag == TAG_END:
                end = True
                break
            length = tag & 0x07
            problems.append(f"unexpected small item 0x{tag:02x} at offset {pos}")
            pos += 1 + length
    if not end and not problems:
        problems.append("no end tag")
    return Vpd(id_string, tuple(fields), checksum_ok, end, tuple(problems))


def _decode_keywords(
    data: bytes, start: int, stop: int, section: str, fields: list[VpdField], problems: list[str]
) -> bool | None:
    """Append the keyword fields of one VPD-R/VPD-W item; return the RV verdict if seen."""
    checksum_ok: bool | None = None
    pos = start
    while pos < stop:
        if pos + 3 > stop:
            problems.append(f"truncated keyword header at offset {pos}")
            break
        keyword = data[pos : pos + 2].decode("latin-1")
        length = data[pos + 2]
        vstart = pos + 3
        vstop = vstart + length
        if vstop > stop:
            problems.append(f"keyword {keyword!r} at offset {pos} runs past its item")
            vstop = stop
        value = data[vstart:vstop]
        fields.append(VpdField(section, keyword, value))
        if keyword == "RV" and section == "R" and vstop > vstart:
            checksum_ok = sum(data[: vstart + 1]) % 256 == 0
        pos = vstart + length
    return checksum_ok


def encode(
    id_string: str,
    read_only: Iterable[tuple[str, bytes | str]],
    read_write: Iterable[tuple[str, bytes | str]] = (),
    reserved: int = 2,
    corrupt_checksum: bool = False,
) -> bytes:
    """Build a VPD image: identifier string, VPD-R (with a correct RV checksum followed by
    ``reserved`` zero bytes), optional VPD-W, end tag. Raises ValueError on a keyword that is
    not 2 characters or a value over 255 bytes.
    """
    out = bytearray()
    ident = id_string.encode("latin-1")
    out += bytes([TAG_ID_STRING, len(ident) & 0xFF, len(ident) >> 8]) + ident
    body = bytearray()
    for keyword, value in read_only:
        body += _keyword(keyword, value)
    rv_len = 1 + reserved
    r_len = len(body) + 3 + rv_len
    header = bytes([TAG_VPD_R, r_len & 0xFF, r_len >> 8])
    prefix = bytes(out) + header + bytes(body) + b"RV" + bytes([rv_len])
    checksum = (-sum(prefix)) % 256
    if corrupt_checksum:
        checksum = (checksum + 1) % 256
    out = bytearray(prefix) + bytes([checksum]) + bytes(reserved)
    w_body = bytearray()
    for keyword, value in read_write:
        w_body += _keyword(keyword, value)
    if w_body:
        out += bytes([TAG_VPD_W, len(w_body) & 0xFF, len(w_body) >> 8]) + w_body
    out.append(TAG_END)
    return bytes(out)


def _keyword(keyword: str, value: bytes | str) -> bytes:
    raw = value.encode("latin-1") if isinstance(value, str) else value
    if len(keyword) != 2:
        raise ValueError(f"VPD keyword must be 2 characters: {keyword!r}")
    if len(raw) > 255:
        raise ValueError(f"VPD value of {keyword} is over 255 bytes")
    return keyword.encode("latin-1") + bytes([len(raw)]) + raw
