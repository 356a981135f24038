"""The view publishing takes of a ``status --json`` object (nvfabric.publish.view): a tray's
fabric, IMEX owner and clique, and a damaged object read as no reading, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

from nvfabric.publish.view import view_of
from nvfabric.rules.cluster import labels
from tests.conftest import run_cli
from tests.runkit import sim


def test_the_view_of_a_tray_status_object(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    status = json.loads(run_cli("status", "--root", str(root), "--json").stdout)
    view = view_of(status)
    assert (view.verdict, view.fabric, view.imex_owner) == ("healthy", "mnnvl", "none")
    assert labels(view)["nvfabric.io/clique"] == "1fa25eba-abfb-58b7-bfcd-4ac6101528a8.32766"
    # a damaged object is no reading, never a crash
    assert view_of({"verdict": "great", "findings": [{"code": "nope"}, 3]}).verdict is None
