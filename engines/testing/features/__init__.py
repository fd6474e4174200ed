"""The features: one registry (FEATURES), each request feature one `Feature` in a file of its
own named after it (engines/testing/features/<feature>.py, which binds it to `FEATURE`), and
the one place that turns a check's uses of them into the `Drawing` its workloads are drawn
from (`drawing_for`).

A feature says what every engine compared must declare for it, whether every check's
workloads carry it (`everywhere`: constraints, stop strings, drafts) or only those of the
checks that use it (a check's `draws`: `children.FEATURE.use()`), what a check's use of it
sets in the Drawing (`configure`), and its hooks into the draws and the seed workloads
(features/base.py). Strategies (engines.testing.strategies) and seed workloads
(engines.testing.seed_workloads) call the hooks of the features a Drawing draws, in ORDER, and
know no feature by name. A new feature is one file here; a check that draws it names it.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.protocol import unknown_name
from engines.testing.features.base import AloneFn, Drawing, Feature, Make, Use, pseudo_tokens
from engines.testing.limits import EngineLimits
from engines.testing.registry import discover

__all__ = ["FEATURES", "ORDER", "AloneFn", "Drawing", "Feature", "Make", "Use", "default_drawing",
           "drawing_for", "feature_named", "pseudo_tokens"]

# The order the hooks are called in, which is the order a draw makes its choices in (so it
# fixes what a Hypothesis seed draws): requests added after the mix (seed groups, families,
# beams), then the rest; a feature not named here comes last, in file-name order.
ORDER: tuple[str, ...] = (
    "seed_groups", "children", "beams", "tenants", "drafts", "stop_strings", "greedy_filters",
    "unseeded_draws", "sequence_draws", "constraints", "prompt_logprobs", "top_logprobs",
    "bad_requests",
)
_NOT_FEATURES = frozenset({"base"})


FEATURES: tuple[Feature, ...] = discover(__name__, __path__, "FEATURE", Feature, order=ORDER,
                                        skip=_NOT_FEATURES)


def feature_named(name: str) -> Feature:
    for feature in FEATURES:
        if feature.name == name:
            return feature
    raise KeyError(unknown_name("feature", name, [f.name for f in FEATURES]))


def drawing_for(limits: EngineLimits, uses: Sequence[Use] = ()) -> Drawing:
    """The Drawing of a check that uses `uses` on an engine with these limits: every feature
    drawn everywhere, and every feature the check uses, that every engine compared declares;
    each used one's `configure` applied with the use's setting."""
    settings = {use.feature: use.setting for use in uses}
    for name in settings:
        feature_named(name)  # a misspelt use is an error, not a feature never drawn
    drawn: list[str] = []
    changes: dict[str, object] = {}
    for feature in FEATURES:
        if not (feature.everywhere or feature.name in settings):
            continue
        if not feature.declared(limits):
            continue
        drawn.append(feature.name)
        if feature.configure is not None and feature.name in settings:
            changes.update(feature.configure(limits, settings[feature.name]))
    return Drawing.from_limits(limits, features=frozenset(drawn), **changes)


def default_drawing(limits: EngineLimits) -> Drawing:
    """`limits` where it is a Drawing already; else what plain limits have always drawn: the
    features every check draws, and tenants (where the limits name adapters or salts), so
    that a caller of the public strategies with EngineLimits gets what it got before."""
    if isinstance(limits, Drawing):
        return limits
    return drawing_for(limits, (feature_named("tenants").use(),))
