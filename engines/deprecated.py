"""The old flat spec paths (engines.continuous, engines.adapters.ct2_variants, ...), kept for
one release as aliases of where the code now is. Importing one warns (DeprecationWarning,
naming the new path); they go in the next release (CHANGELOG.md)."""

from __future__ import annotations

import warnings

__all__ = ["moved"]


def moved(old: str, new: str) -> None:
    """Warn that module `old` is an alias of `new`, kept for one release."""
    warnings.warn(f"{old} is deprecated and goes in the next release: import {new} (a spec "
                  f"{old}:FACTORY is {new}:FACTORY)", DeprecationWarning, stacklevel=3)
