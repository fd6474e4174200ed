"""The coverage summary's sentence on speculative decoding, from the engine's own `Exercised`
counters (`spec_draft_tokens`, `spec_accepted_tokens`, engines.protocol): the acceptance
rate the run exercised, and a plain warning where drafts were made but none was accepted
(then no accepted run, bonus token or rollback past an accepted draft was tested, whatever
the checks say). An engine that reports no such counters gets no sentence."""

from __future__ import annotations

from collections.abc import Mapping

from engines.testing.coverage import ENGINE

__all__ = ["speculation_notes"]

DRAFTED = f"{ENGINE}spec draft tokens"
ACCEPTED = f"{ENGINE}spec accepted tokens"


def speculation_notes(data: Mapping[str, int]) -> list[str]:
    if DRAFTED not in data:
        return []
    drafted, accepted = data.get(DRAFTED, 0), data.get(ACCEPTED, 0)
    if drafted == 0:
        return ["speculation: the engine counts drafts but made none in this run: "
                "speculative decoding was not tested"]
    if accepted == 0:
        return [f"speculation: NO draft accepted ({drafted} drafted): speculative decoding's "
                "accepted runs (bonus tokens, stops and budgets inside a run, KV kept past "
                "a draft) were not tested"]
    return [f"speculation: {accepted} of {drafted} draft tokens accepted "
            f"({100 * accepted / drafted:.1f}%)"]
