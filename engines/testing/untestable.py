"""Declarations the run cannot test, said when the run starts (in the header, or as the first
check builds its engine), each with what to add: a user who declared stop strings without a
tokenizer learns it before the checks run, not from a skip reason in the closing summary
(issue 51).

A declaration is untestable when the engine declares a field the suite will never draw in this
run: stop strings or guided decoding without the tokenizer that gives them their meaning, one
of the two stop-string fields without the other, or a field the reference engine or a variant
does not declare (what every engine compared declares is drawn). Not "lora" without adapters:
our engines declare it for the adapters they are given, and draw salts without them. A
misspelt declaration is an error already (engines.protocol.Capabilities), naming the fields
a feature's name stands for (engines.protocol.FIELD_SYNONYMS).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from engines.protocol import TEXT_PARAMS, Capabilities, capabilities_of
from engines.testing.context import SuiteContext

__all__ = ["announce", "say_once", "untestable"]

# Fields whose requests mean something only through a tokenizer's text.
NEEDS_TOKENIZER = TEXT_PARAMS | {"guided"}
TOKENIZER_HINT = ("add tokenizer=DIR to its Capabilities (a directory holding the tokenizer.json "
                  "of its vocabulary; for our presets, engines.adapters.common.checkpoints."
                  "export_preset(preset, tokenizer=\"bpe\") writes one)")
_announced = pytest.StashKey[set[int]]()


def _names(fields: set[str] | frozenset[str]) -> str:
    return ", ".join(sorted(fields))


def _own(ctx: SuiteContext) -> Capabilities:
    """The engine's own declarations (not what every engine compared shares), read off an
    idle engine of its pool (built when the context was)."""
    engine, _ = ctx.pool.acquire()
    try:
        return capabilities_of(engine)
    finally:
        ctx.pool.release(engine)


def untestable(ctx: SuiteContext) -> list[str]:
    """One sentence per declaration of the engine that this run cannot test, with the fix."""
    own = _own(ctx)
    declared = own.supported_sampling
    out = []
    text = declared & NEEDS_TOKENIZER
    if text and own.tokenizer is None:
        out.append(f"{ctx.name} declares {_names(text)} but no tokenizer, so none is drawn and "
                   f"the checks of text (stop_strings, streamed_text) do not run: "
                   f"{TOKENIZER_HINT}, or drop {_names(text)} from supported_sampling")
    elif own.tokenizer is not None and not os.path.isfile(
            os.path.join(own.tokenizer, "tokenizer.json")):
        out.append(f"{ctx.name} declares tokenizer {own.tokenizer!r}, which holds no "
                   "tokenizer.json: the checks of text cannot read it; "
                   f"{TOKENIZER_HINT}")
    half = declared & TEXT_PARAMS
    if half and half != TEXT_PARAMS:
        out.append(f"{ctx.name} declares {_names(half)} but not "
                   f"{_names(TEXT_PARAMS - half)}: stop strings are drawn only where both are "
                   "declared, so stop_strings does not run; declare both")
    if ctx.limits.min_temperature:
        out.append(f"{ctx.name} (or an engine compared with it) declares min_temperature "
                   f"{ctx.limits.min_temperature:g}: a lower temperature would be served at it, "
                   "so no lower temperature is drawn")
    unshared = declared - ctx.limits.sampling_fields
    if unshared:
        others = " or ".join(
            (["the reference engine"] if ctx.options.reference is not None else [])
            + (["a variant"] if ctx.options.variants else [])) or "an engine compared"
        out.append(f"{ctx.name} declares {_names(unshared)}, which {others} does not: only "
                   "what every engine compared declares is drawn, so these are not tested in "
                   "this run; declare them there too to test them")
    return out


def _first_time(config: pytest.Config, ctx: SuiteContext) -> bool:
    seen = config.stash.setdefault(_announced, set())
    if id(ctx) in seen:
        return False
    seen.add(id(ctx))
    return True


def announce(config: pytest.Config, ctx: SuiteContext | None) -> list[str]:
    """The header's lines for `ctx` (the engine named on the command line, built for the
    header), marked said. An xdist worker's header reaches no one: there say_once says them."""
    if ctx is None or getattr(config, "workerinput", None) is not None:
        return []
    if not _first_time(config, ctx):
        return []
    return [f"batching-engines: warning: {line}" for line in untestable(ctx)]


def say_once(config: Any, ctx: SuiteContext) -> None:
    """Say the lines for a context the header did not (a fixture's engine, built by its first
    check; an xdist worker's), once per process, through the progress lines' writer."""
    from engines.testing.progress_lines import writer

    if not _first_time(config, ctx):
        return
    found = writer(config)
    if found is None:
        return
    for line in untestable(ctx):
        found[0](f"batching-engines: warning: {line}")
