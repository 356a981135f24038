"""The one exception type of nvfabric.

Every expected failure (unreadable input, a blocked plan, a daemon that died) is raised as
:class:`NvfabricError`; the CLI prints it as one line (or one JSON object) and exits with its
``exit_code``. Anything else escaping is a bug.
"""

from __future__ import annotations

from nvfabric.model.findings import Finding


class NvfabricError(Exception):
    """An expected failure carrying a finding.

    ``exit_code`` follows the public contract: 1 the checked thing is bad, 2 usage or
    unreadable input.
    """

    def __init__(self, finding: Finding, exit_code: int = 1) -> None:
        super().__init__(finding.message)
        self.finding = finding
        self.exit_code = exit_code


def usage_error(message: str, hint: str = "") -> NvfabricError:
    """An error about the caller's input (bad file, bad value): exit code 2."""
    return NvfabricError(Finding("input_unreadable", "error", message, hint), exit_code=2)
