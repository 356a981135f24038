"""Lazy re-exports of a package (PEP 562): its ``__init__`` says which names it re-exports and
the module that defines each, and a name is imported from there on first use, so that
importing one part of the package does not import all the others (issue 15: what ``nvfabric
run`` imports before NVLSM may start). Used by :mod:`nvfabric.supervisor` and
:mod:`nvfabric.artifacts`; the simulated node's fakes, which may import nothing of nvfabric,
keep their own."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` (its ``__name__``): ``table`` maps each
    re-exported name to the module that defines it, absolute or relative to ``package``
    (``.model``). The value is imported on first use and kept in the package's namespace, so
    later lookups do not come here again. AttributeError for a name not in ``table``."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
