"""The finding codes page of the docs (docs/finding-codes.md), generated: ``python -m
tests.docgen`` (``make docs-codes``) writes it, ``python -m tests.docgen --check`` exits 1 while
the committed page differs (tests/meta/test_docs.py runs the same comparison).

Sources, each read as the code reads it:

- the vocabulary: every code of :data:`nvfabric.model.vocab.FindingCode`, in its order, the
  founding catalogue being the group under its first comment (``model/vocab.py``); the same
  words as :data:`nvfabric.model.findings.CODES`;
- ``docs/codes.yaml``: one line of meaning per code (a code without one, or a line for no code,
  is an error naming it);
- the catalogues ``src/nvfabric/data/*.json`` (the JSON twins nvfabric reads at run time): the
  log signatures of ``nvfabric doctor`` that give each code (with their severity, per fabric
  kind and per catalogue class), the NVSwitch SXid classes, the GPU NVLink Xids with NVIDIA's
  NVLink 5 decode rows, and the CUDA results the NCCL signatures look up.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, get_args

import yaml

from nvfabric.model.findings import CODES
from nvfabric.model.vocab import FindingCode

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "finding-codes.md"
MEANINGS = REPO / "docs" / "codes.yaml"
VOCAB = REPO / "src" / "nvfabric" / "model" / "vocab.py"
DATA = REPO / "src" / "nvfabric" / "data"


class DocgenError(Exception):
    """The sources disagree (a code without a meaning, a meaning without a code)."""


def founding_codes() -> list[str]:
    """The codes of the founding catalogue: the ``FindingCode`` literals before its second
    comment line, read from the source of ``model/vocab.py`` (the comments are the groups)."""
    source = VOCAB.read_text()
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "FindingCode" for t in node.targets):
            lines = source.splitlines()[node.lineno - 1:node.end_lineno]
            break
    else:
        raise DocgenError(f"{VOCAB}: no FindingCode")
    out: list[str] = []
    comments = 0
    for line in lines:
        text = line.strip()
        if text.startswith("#"):
            comments += 1
            if comments == 2:
                break
        elif text.startswith('"'):
            out.append(text.strip('",'))
    return out


def meanings(codes: list[str]) -> dict[str, str]:
    """``docs/codes.yaml`` checked against the vocabulary."""
    raw = yaml.safe_load(MEANINGS.read_text())
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise DocgenError(f"{MEANINGS}: expected one `code: meaning` line per code")
    missing = [c for c in codes if c not in raw]
    unknown = sorted(set(raw) - set(codes))
    if missing or unknown:
        raise DocgenError(f"{MEANINGS}: no meaning for {missing}; no such code: {unknown}"
                          " (every code of nvfabric.model.vocab.FindingCode needs one line)")
    return {str(k): str(v) for k, v in raw.items()}


def _load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def signatures_by_code(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """code -> one entry per signature that can give it: ``id`` (severity; where it differs:
    per fabric kind, per catalogue class)."""
    out: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        outcomes: dict[str, list[str]] = defaultdict(list)
        base_code, base_sev = row.get("code"), row["severity"]
        if base_code:
            outcomes[base_code].append(base_sev)
        for fabric, over in sorted(row.get("by_fabric", {}).items()):
            code = over.get("code", base_code)
            if code:
                outcomes[code].append(f"{fabric}: {over.get('severity', base_sev)}")
        lookup = row.get("lookup", {})
        for cls, over in lookup.get("by_class", {}).items():
            code = over.get("code", base_code)
            if code:
                outcomes[code].append(f"{lookup['table']} {cls}: {over.get('severity', base_sev)}")
        for code, sevs in outcomes.items():
            out[code].append(f"`{row['id']}` ({'; '.join(sevs)})")
    return out


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _code_table(codes: list[str], meaning: dict[str, str], sigs: dict[str, list[str]]) -> str:
    rows = ["| code | meaning | `doctor` signatures (severity) |", "| --- | --- | --- |"]
    for code in codes:
        rows.append(f"| `{code}` | {_escape(meaning[code])} | "
                    f"{_escape(', '.join(sigs.get(code, [])))} |")
    return "\n".join(rows)


def render() -> str:
    """The whole page."""
    codes = list(get_args(FindingCode))
    if set(codes) != CODES:
        raise DocgenError("FindingCode and CODES differ")
    founding = founding_codes()
    meaning = meanings(codes)
    signatures = _load("signatures.json")
    sigs = signatures_by_code(signatures)
    sxid, xid, cuda = _load("sxid.json"), _load("xid.json"), _load("cuda.json")
    added = [c for c in codes if c not in founding]
    out = [
        "# Finding codes",
        "",
        "<!-- Generated by `make docs-codes` (python -m tests.docgen) from the vocabulary",
        "(src/nvfabric/model/vocab.py), docs/codes.yaml and src/nvfabric/data/*.json: edit those,",
        "not this page. tests/meta/test_docs.py fails while the two differ. -->",
        "",
        "Every problem nvfabric reports is a finding: `{\"code\", \"severity\": "
        "\"info|warning|error\", \"message\", \"hint\"}` plus fields of its own (e.g. "
        "`fm_version` and `driver_version` for `version_mismatch`). Codes are extended, never "
        "renamed: alert on them. A command's exit code follows its findings "
        "([every command](commands/index.md#exit-codes)); `doctor` gives the severity of a "
        "log line by the node's fabric kind ([doctor](commands/doctor.md)).",
        "",
        f"{len(codes)} codes: {len(founding)} of the founding catalogue, {len(added)} added by "
        f"nvfabric. The third column names the {len(signatures)} log signatures of "
        "`src/nvfabric/data/signatures.yaml` that give each code, with the severity they give "
        "it: the signature's own, and the fabric kind (`none`, `nvswitch`, `nvlink5`, `mnnvl`, "
        "`unknown`) or catalogue class where that changes the code or the severity. Codes "
        "without a signature come from the readers, the plan, the verdict and the commands.",
        "",
        "## The founding catalogue",
        "",
        _code_table(founding, meaning, sigs),
        "",
        "## Added by nvfabric",
        "",
        _code_table(added, meaning, sigs),
        "",
        "## The catalogues",
        "",
        "### NVSwitch SXids",
        "",
        f"`src/nvfabric/data/sxid.yaml`, from {sxid['source']}. An SXid line without a severity "
        "word takes the severity of its class:",
        "",
        "| class | finding | SXids |",
        "| --- | --- | --- |",
    ]
    catalogue_row = next(r for r in signatures if r["id"] == "sxid-catalogue")
    for cls, entries in sxid["classes"].items():
        over = catalogue_row["lookup"]["by_class"].get(cls, {})
        code = over.get("code", catalogue_row["code"])
        sev = over.get("severity", catalogue_row["severity"])
        numbers = ", ".join(sorted(entries, key=int))
        out.append(f"| {cls} | `{code}` ({sev}) | {numbers} |")
    decode: dict[str, int] = defaultdict(int)
    for row in xid["nvlink5_decode"]:
        decode[str(row["xid"])] += 1
    out += [
        "",
        "### GPU NVLink Xids",
        "",
        f"`src/nvfabric/data/xid.yaml`, from {xid['source']}: each is `nvlink_xid_error`; an Xid "
        "45 caused by one of them too. NVLink 5 Xids with their hex words are decoded by the "
        f"{len(xid['nvlink5_decode'])} rows of NVIDIA's sheet \"XID 144-150 Decode\" "
        "(immediate and investigatory action).",
        "",
        "| Xid | mnemonic | description | resolution | decode rows |",
        "| --- | --- | --- | --- | --- |",
    ]
    for number, entry in xid["xids"].items():
        out.append(f"| {number} | `{entry['mnemonic']}` | {_escape(entry['description'])} | "
                   f"`{entry['resolution']}` | {decode.get(number, 0)} |")
    out += [
        "",
        "### CUDA results",
        "",
        f"`src/nvfabric/data/cuda.yaml`, from {cuda['source']} ({len(cuda['results'])} "
        "results): the CUDA error an NCCL NVLS set-up failure prints decides its finding and "
        "hint:",
        "",
        "| CUDA error | name | finding (severity), by signature |",
        "| --- | --- | --- |",
    ]
    by_name = {v["name"]: k for k, v in cuda["results"].items()}
    looked: dict[str, list[str]] = defaultdict(list)
    for row in signatures:
        lookup = row.get("lookup", {})
        if lookup.get("table") != "cuda":
            continue
        for cls, over in lookup.get("by_class", {}).items():
            code = over.get("code", row["code"])
            looked[cls].append(f"`{code}` ({over.get('severity', row['severity'])}), "
                               f"`{row['id']}`")
    for name in sorted(looked, key=lambda n: int(by_name.get(n, sys.maxsize))):
        number, label = (by_name[name], f"`{name}`") if name in by_name else ("other", "any other")
        out.append(f"| {number} | {label} | {'; '.join(looked[name])} |")
    out += ["", "Any other CUDA error (or a text that names none) keeps its name in the message, "
            "with a neutral hint.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.docgen", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/finding-codes.md is not what would be written")
    args = parser.parse_args(argv)
    try:
        text = render()
    except DocgenError as err:
        print(f"docgen: {err}", file=sys.stderr)
        return 2
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"docgen: {PAGE.relative_to(REPO)} is not what `make docs-codes` writes",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(REPO)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
