"""Counts and durations in messages: ``1 GPU``, ``2 GPUs``, ``1 node list entry``, ``3
NVSwitches``, ``3 s``. Pure.

Every count nvfabric prints goes through :func:`plural` (and the verb after it through
:func:`verb`), so that no message says ``1 GPUs`` or ``1 GPU(s)``; every duration in seconds
through :func:`seconds`, so that none says ``2.99997 s`` (a bound computed from a deadline).
"""

from __future__ import annotations

#: Plurals that the spelling rules below do not give.
_IRREGULAR = {"is": "are", "has": "have", "was": "were", "does": "do"}


def plural_noun(noun: str) -> str:
    """English plural of ``noun`` (the last word changes: ``node list entry`` -> ``node list
    entries``, ``NVSwitch`` -> ``NVSwitches``, ``GPU`` -> ``GPUs``)."""
    head, _, last = noun.rpartition(" ")
    lower = last.lower()
    if lower in _IRREGULAR:
        many = _IRREGULAR[lower]
    elif lower.endswith(("s", "x", "ch", "sh")):
        many = last + "es"
    elif lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        many = last[:-1] + "ies"
    else:
        many = last + "s"
    return f"{head} {many}" if head else many


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, the noun in the plural unless ``count`` is 1 (``many``: the
    plural when the rules do not give it)."""
    return f"{count} {noun if count == 1 else (many or plural_noun(noun))}"


def verb(count: int, one: str, many: str) -> str:
    """``one`` when ``count`` is 1, else ``many`` (``is``/``are``, ``has``/``have``)."""
    return one if count == 1 else many


def seconds(value: float) -> str:
    """``value`` seconds as a message says them, to the millisecond and without trailing
    zeros: ``3`` for 2.99997, ``0.25``, ``300``, ``1.5e+06`` for a large one (``:g``)."""
    return f"{round(value, 3):g}"
