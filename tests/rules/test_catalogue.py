"""The JSON twins nvfabric reads hold exactly the shipped YAML catalogues (tests/catalogues.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from nvfabric.rules import catalogue as catalogue_rules
from tests import runkit
from tests.catalogues import DATA, render, stale


def test_every_yaml_catalogue_has_an_equal_json_twin() -> None:
    assert sorted(p.name for p in DATA.glob("*.yaml")) == [
        "cuda.yaml", "signatures.yaml", "sxid.yaml", "xid.yaml"]
    assert stale() == [], "run `make catalogues` after editing a YAML catalogue"


def test_a_changed_yaml_is_reported_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for source in DATA.glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
        (tmp_path / source.with_suffix(".json").name).write_text(render(source), encoding="utf-8")
    monkeypatch.setattr("tests.catalogues.DATA", tmp_path)
    assert stale() == []
    xid = tmp_path / "xid.yaml"
    xid.write_text(xid.read_text(encoding="utf-8") + "added_key: 1\n", encoding="utf-8")
    assert stale() == [xid]
    (tmp_path / "sxid.json").unlink()
    assert stale() == [tmp_path / "sxid.yaml", xid]


def test_the_classifier_reads_what_the_yaml_says() -> None:
    from_yaml = catalogue_rules.parse_catalogue(
        yaml.safe_load((DATA / "signatures.yaml").read_text(encoding="utf-8")))
    assert catalogue_rules.catalogue() == from_yaml
    sxid = yaml.safe_load((DATA / "sxid.yaml").read_text(encoding="utf-8"))
    table = catalogue_rules.lookup_table("sxid")
    for cls, rows in sxid["classes"].items():
        for number, label in rows.items():
            assert table[int(number)] == {"class": cls, "name": label}
    xids = yaml.safe_load((DATA / "xid.yaml").read_text(encoding="utf-8"))["xids"]
    assert {n: e["mnemonic"] for n, e in xids.items()} == {
        n: e["name"] for n, e in catalogue_rules.lookup_table("xid").items()}


def test_no_yaml_is_imported_or_parsed_to_classify() -> None:
    code = ("import json, sys\nfrom nvfabric.rules.catalogue import lookup_table\n"
            "from nvfabric.rules.diagnose import Classifier\n"
            "Classifier('nvlink5'); lookup_table('sxid'); lookup_table('xid')\n"
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m == 'yaml' or m.startswith(('yaml.', 'importlib.res')))))")
    out = runkit.run([sys.executable, "-c", code], check=True).stdout
    assert json.loads(out) == []
