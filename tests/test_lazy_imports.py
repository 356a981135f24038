"""What `nvfabric run` imports before NVLSM may start (issue 15): every module costs start-up
time (0.3-1 ms each on a slow node, a frozen dataclass 0.8 ms), so the run path imports
neither the IMEX machinery on a fabric manager node nor the supervisor's loop, which only the
lean process needs. Checked in a fresh interpreter: the test process has imported everything.
"""

from __future__ import annotations

import json
import sys

import pytest

import nvfabric.supervisor as supervisor
from tests import runkit


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = runkit.run([sys.executable, "-c",
                      f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                     check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


#: Modules the run command's module must not pull in at import.
NOT_ON_THE_RUN_PATH = (
    "nvfabric.cli.imex", "nvfabric.facts.imex", "nvfabric.facts.imexctl",
    "nvfabric.rules.imex.owner", "nvfabric.rules.imex.domain", "nvfabric.effects.imex",
    "nvfabric.supervisor.loop", "nvfabric.supervisor.unit", "nvfabric.supervisor.ready",
    "nvfabric.supervisor.supervise", "nvfabric.rules.diagnose", "xml.etree.ElementTree",
)


def test_the_run_command_imports_no_imex_and_no_supervisor_loop() -> None:
    loaded = _modules_after("import nvfabric.cli.run")
    assert "nvfabric.cli.run" in loaded
    assert sorted(loaded & set(NOT_ON_THE_RUN_PATH)) == []


def test_a_supervisor_part_imports_only_what_it_needs() -> None:
    loaded = _modules_after("import nvfabric.supervisor.policy")
    assert "nvfabric.supervisor.policy" in loaded
    assert not loaded & {"nvfabric.supervisor.loop", "nvfabric.supervisor.supervise",
                         "nvfabric.effects.process", "selectors"}


@pytest.mark.parametrize("name", supervisor.__all__)
def test_every_re_exported_supervisor_name_resolves_from_its_module(name: str) -> None:
    value = getattr(supervisor, name)
    module = supervisor._DEFINED_IN[name]
    assert value is getattr(sys.modules[module], name)
    assert vars(supervisor)[name] is value  # kept: the next lookup is a plain attribute


def test_the_re_export_list_and_the_table_agree_and_strangers_are_refused() -> None:
    assert sorted(supervisor.__all__) == sorted(supervisor._DEFINED_IN)
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        supervisor.nonesuch  # noqa: B018
