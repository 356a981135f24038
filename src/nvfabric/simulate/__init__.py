"""Simulated nodes: node specs, real-shaped trees, built-in profiles (and fake daemons).

Used by ``nvfabric simulate``, the demo and the tests; writes only into a new or empty
directory and never outside it.
"""

from __future__ import annotations

from typing import Any

from nvfabric.simulate.profiles import PROFILES
from nvfabric.simulate.spec import NodeSpec, SpecError, parse
from nvfabric.simulate.write import build

__all__ = ["PROFILES", "NodeSpec", "SpecError", "build", "parse", "profile_spec"]


def profile_spec(name: str) -> NodeSpec:
    """The spec of a built-in profile; SpecError with the known names when unknown."""
    raw: dict[str, Any] | None = PROFILES.get(name)
    if raw is None:
        raise SpecError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    return parse(raw)
