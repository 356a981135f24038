"""nvfabric.model.strict: the one number, JSON, YAML and file-size rule of every reader (issue 10),
and the config round trip: what nvfabric writes reads back identically."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvfabric.bringup import fmconfig as fm
from nvfabric.model import fmkeys, keyvalue, strict
from nvfabric.model.errors import NvfabricError
from nvfabric.rules.imex import config as imex_config
from tests.cases import CORPUS
from tests.conftest import run_cli


@pytest.mark.parametrize("text,kw,want", [
    ("0", {}, 0), ("4096", {}, 4096), ("-1", {"signed": True}, -1),
    ("0xa751e84a", {"base": 16}, 0xA751E84A), ("a751e84a", {"base": 16}, 0xA751E84A),
    ("00000000", {"base": 0}, 0), ("0x10", {"base": 0}, 16), ("9" * 40, {}, int("9" * 40)),
])
def test_plain_numbers_are_read(text: str, kw: dict[str, object], want: int) -> None:
    assert strict.to_int(text, **kw) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("text,kw", [
    ("²", {}), ("٣", {}), ("１", {}), ("--1", {"signed": True}), ("-1", {}), ("+1", {}),
    ("1_0", {}), (" 1", {}), ("1 ", {}), ("", {}), ("-", {"signed": True}), ("0x", {"base": 16}),
    ("9" * 41, {}), ("9" * 4301, {}), ("0o17", {"base": 0}), ("0b1", {"base": 0}),
    ("1e3", {}), ("0x1g", {"base": 16}), ("5", {"high": 4}), ("-2", {"signed": True, "low": -1}),
])
def test_what_isdigit_or_int_would_let_through_is_refused(text: str, kw: dict[str, object]
                                                          ) -> None:
    with pytest.raises(strict.BadValue):
        strict.to_int(text, **kw)  # type: ignore[arg-type]
    assert strict.int_or_none(text, **kw) is None  # type: ignore[arg-type]


@given(st.one_of(st.text(max_size=60), st.from_regex(r"-?[0-9]{1,45}", fullmatch=True)))
def test_to_int_accepts_exactly_ascii_digits_with_one_sign(text: str) -> None:
    plain = re.fullmatch(r"-?[0-9]{1,40}", text) is not None and "\n" not in text
    try:
        value = strict.to_int(text, signed=True)
    except strict.BadValue:
        assert not plain
        return
    assert plain and value == int(text)


def test_floats_are_plain_decimals_only() -> None:
    assert strict.to_float("12345.67") == 12345.67
    for bad in ("nan", "inf", "1e5", "١.٢", "1.", ".5", "1_0.0", "9" * 65):
        with pytest.raises(strict.BadValue):
            strict.to_float(bad)


@pytest.mark.parametrize("doc,needle", [
    ('{"a": ' + "9" * 4301 + "}", "digits"), ('{"a": 1' + "0" * 50 + "}", "digits"),
    ('{"a": NaN}', "NaN"), ('{"a": -Infinity}', "Infinity"), ("[" * 65 + "]" * 65, "nested"),
    ("[" * 100_000, "nested"), ('{"a": 1.' + "0" * 100 + "}", "characters"), ("{", "not JSON"),
    (b"\xff{}", "UTF-8"),
])
def test_json_documents_are_bounded(doc: str | bytes, needle: str) -> None:
    with pytest.raises(strict.BadValue, match=needle):
        strict.parse_json(doc)


def test_json_depth_inside_strings_does_not_count() -> None:
    assert strict.parse_json('{"a": "' + "[" * 1000 + '"}') == {"a": "[" * 1000}


def test_json_types_are_checked_with_the_path() -> None:
    doc = strict.parse_json('{"nodes": {"0": {"connections": "1"}}}')
    nodes = strict.obj(doc["nodes"], "nodes")
    with pytest.raises(strict.BadValue, match=r"nodes\.0\.connections: expected an object, "
                                              r"got a string"):
        strict.obj(nodes["0"]["connections"], "nodes.0.connections")
    with pytest.raises(strict.BadValue, match="expected an integer, got a boolean"):
        strict.integer(True, "x")
    assert strict.text(None, "x", optional=True) == ""


def test_real_json_captures_load_unchanged() -> None:
    for path in sorted((CORPUS / "redist").glob("*.json")) + sorted(
            (CORPUS / "imex").glob("*.json")):
        assert strict.parse_json(path.read_bytes()) == json.loads(path.read_bytes()), path


def test_yaml_alias_bomb_and_nesting_are_refused_before_construction() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
        for i in range(6))
    with pytest.raises(NvfabricError, match="more than 100000 YAML nodes"):
        strict.load_yaml(bomb, "spec")
    with pytest.raises(NvfabricError, match="nested"):
        strict.load_yaml("- " * 70 + "x\n", "spec")
    assert strict.load_yaml("a: [1, 2]\n", "spec") == {"a": [1, 2]}


# --- config values: refused when splitlines() would split them; written == read back ------

SEPARATORS = ["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("sep", SEPARATORS)
def test_every_line_separator_in_a_value_is_refused(sep: str) -> None:
    value = f"/var/log/fm.log{sep}DAEMONIZE=1"
    assert len(value.splitlines()) == 2  # the kind: each of these starts a new key
    with pytest.raises(keyvalue.ConfigValueError):
        keyvalue.validate("LOG_FILE_NAME", value)
    with pytest.raises(fmkeys.ConfigError):
        fmkeys.check_value("LOG_FILE_NAME", value)
    with pytest.raises(keyvalue.ConfigValueError):
        imex_config.effective(None, {"LOG_FILE_NAME": value})


@pytest.mark.parametrize("sep", ["\u2028", "\x85", "\x1e"])
def test_fm_set_with_a_unicode_line_separator_is_exit_2(tmp_path: Path, sep: str) -> None:
    root = tmp_path / "n"
    assert run_cli("simulate", "dgx-b200", str(root)).returncode == 0
    proc = run_cli("run", "--root", str(root), "--dry-run", "--fm-set",
                   f"LOG_LEVEL=4{sep}DAEMONIZE=1")
    assert proc.returncode == 2, proc.stderr
    assert "config_invalid_value" in proc.stderr and "LOG_LEVEL" in proc.stderr


def test_value_with_blanks_around_or_not_utf8_is_refused() -> None:
    for value in (" 4", "4 ", "\t4", "4\u3000", "/a\udc85"):
        with pytest.raises(keyvalue.ConfigValueError):
            keyvalue.validate("LOG_LEVEL", value)


_value = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True), _value,
                       max_size=5))
def test_what_keyvalue_writes_reads_back_identically(changes: dict[str, str]) -> None:
    shipped = (CORPUS / "configs" / "fabricmanager-535.216.01.cfg").read_text()
    try:
        patched = keyvalue.patch(keyvalue.parse(shipped), changes)
    except keyvalue.ConfigValueError:
        assert any(not strict.one_line(v) or "\x00" in v or v != v.strip()
                   for v in changes.values())
        return
    back = keyvalue.parse(keyvalue.render(patched))
    for key, value in changes.items():
        assert back.get(key) == value
    assert back.items() == patched.items()


@settings(max_examples=200, deadline=None)
@given(_value)
def test_fabric_manager_effective_config_reads_back_identically(value: str) -> None:
    shipped = (CORPUS / "configs" / "fabricmanager-535.216.01.cfg").read_text()
    try:
        # BIND_INTERFACE_IP: a key of the shipped file whose value nvfabric does not check
        # beyond the line rules (only keys fabric manager knows may be set)
        eff = fm.effective(shipped, root="/", sets={"LOG_LEVEL": "4", "FM_STAY_RESIDENT_"
                                                   "ON_FAILURES": "1", "BIND_INTERFACE_IP": value})
    except fmkeys.ConfigError:
        assert not strict.one_line(value) or "\x00" in value or value != value.strip()
        return
    back = keyvalue.parse(eff.text)
    assert back.items() == eff.cfg.items()
    assert back.get("BIND_INTERFACE_IP") == value


@settings(max_examples=200, deadline=None)
@given(_value)
def test_imex_config_reads_back_identically(value: str) -> None:
    shipped = (CORPUS / "imex" / "k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg"
               ).read_text()
    try:
        text = imex_config.effective(shipped, {"IMEX_NODE_CONFIG_FILE": value})
    except keyvalue.ConfigValueError:
        return
    assert keyvalue.parse(text).get("IMEX_NODE_CONFIG_FILE") == value


#: The calls that turn text into numbers or documents outside nvfabric.model.strict, each with why
#: it is not a reader of input: (file under src/nvfabric, text of the call).
NOT_READERS = {
    ("supervisor/lean.py", "json.loads(sys.argv[4])"): "the boot line's own sys.path, "
    "written by nvfabric run for the exec",
    ("supervisor/job.py", "json.loads(json.dumps(out)"): "a round trip of values in memory",
    ("simulate/fakes.py", "json.loads(line)"): "the fakes' call log, read by the tests",
    ("simulate/fakebin/state.py", "json.loads(fh.read()"): "a fake daemon's own state (the "
    "fakes import nothing of nvfabric)",
    ("simulate/fakebin/state.py", "json.loads(env)"): "the faults a test sets for the fakes",
    ("rules/catalogue.py", "json.load(fh)"): "the package's own catalogue, checked against "
    "its YAML by make test",
}
_BYPASS = re.compile(r"\.(?:isdigit|isdecimal|isnumeric)\(\)|json\.loads?\([^)]*\)?|"
                     r"yaml\.(?:safe_)?load(?:_all)?\(")  # a call up to its first ")"


def test_every_reader_goes_through_strict() -> None:
    # str.isdigit() accepts what int() refuses ('²'), json.loads recurses into RecursionError
    # on 1,000 nested '[': outside strict.py only the calls listed above, which read no input
    src = Path(__file__).resolve().parents[2] / "src/nvfabric"
    found = set()
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel == "model/strict.py":
            continue
        text = path.read_text(encoding="utf-8")
        found |= {(rel, m.group(0)) for m in _BYPASS.finditer(text)}
    assert found - set(NOT_READERS) == set()
    assert set(NOT_READERS) - found == set()  # a listed call that is gone: drop it here
