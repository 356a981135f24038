"""What `nvfabric run` imports before NVLSM may start: every module costs start-up time (0.3-1
ms each on a slow node, a frozen dataclass 0.8 ms). `run` is one procedure for every fabric
kind, its modules imported at the top, so a fabric manager node imports the IMEX bring-up too
(its cost is measured by bench/bench_run.py); what only the lean supervisor process needs (the
event loop, the state machine, the live diagnosis), what only a reading of a capture needs
(the XML parser) and what only `--listen` needs (the HTTP server) stay out. Checked in a fresh
interpreter: the test process has imported everything.
"""

from __future__ import annotations

import json
import sys

from tests import runkit


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = runkit.run([sys.executable, "-c",
                      f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                     check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


#: Modules the run command's module must not pull in at import.
NOT_ON_THE_RUN_PATH = (
    "nvfabric.cli.imex", "nvfabric.rules.imex.domain", "nvfabric.supervisor.loop",
    "nvfabric.supervisor.machine", "nvfabric.supervisor.supervise", "nvfabric.rules.diagnose",
    "xml.etree.ElementTree", "http.server", "hashlib", "rich",
)


def test_the_run_command_imports_no_supervisor_loop_no_xml_and_no_http_server() -> None:
    loaded = _modules_after("import nvfabric.cli.run")
    assert "nvfabric.cli.run" in loaded
    assert sorted(loaded & set(NOT_ON_THE_RUN_PATH)) == []


def test_a_supervisor_part_imports_only_what_it_needs() -> None:
    loaded = _modules_after("import nvfabric.supervisor.policy")
    assert "nvfabric.supervisor.policy" in loaded
    assert not loaded & {"nvfabric.supervisor.loop", "nvfabric.supervisor.supervise",
                         "nvfabric.effects.process", "selectors"}
