"""The JSON twins of the shipped YAML data files (src/nvfabric/data/*.yaml -> *.json).

The YAML files are the catalogues people edit (signatures, SXid and Xid tables, with their
comments and sources); nvfabric reads the JSON beside each one
(:func:`nvfabric.rules.catalogue.shipped_data`), so that no command imports PyYAML or parses
YAML at start-up. ``python -m tests.catalogues`` (``make catalogues``) writes every twin from
its YAML; ``python -m tests.catalogues --check`` lists the twins that differ (exit 1).
tests/rules/test_catalogue.py runs the check in ``make test``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).resolve().parents[1] / "src" / "nvfabric" / "data"


def as_json(yaml_path: Path) -> Any:
    """The YAML file's content as JSON has it (mapping keys become strings)."""
    return json.loads(json.dumps(yaml.safe_load(yaml_path.read_text(encoding="utf-8"))))


def render(yaml_path: Path) -> str:
    """The text of the JSON twin of ``yaml_path``."""
    return json.dumps(as_json(yaml_path), indent=1, ensure_ascii=False) + "\n"


def stale() -> list[Path]:
    """YAML files whose JSON twin is missing or holds other data."""
    out = []
    for source in sorted(DATA.glob("*.yaml")):
        twin = source.with_suffix(".json")
        try:
            same = json.loads(twin.read_text(encoding="utf-8")) == as_json(source)
        except (OSError, ValueError):
            same = False
        if not same:
            out.append(source)
    return out


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        for source in stale():
            print(f"{source.with_suffix('.json').name} differs from {source.name}: run "
                  "`make catalogues`", file=sys.stderr)
        return 1 if stale() else 0
    for source in sorted(DATA.glob("*.yaml")):
        source.with_suffix(".json").write_text(render(source), encoding="utf-8")
        print(f"wrote {source.with_suffix('.json').relative_to(DATA.parents[2])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
