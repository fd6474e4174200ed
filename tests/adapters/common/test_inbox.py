"""engines.adapters.common.inbox: step() takes what the engine's own threads produced, waiting
for a first event only as long as asked."""

from __future__ import annotations

import threading

from engines.adapters.common.inbox import Inbox


def test_take_waits_for_a_first_event_then_takes_everything_queued() -> None:
    inbox: Inbox[int] = Inbox()
    assert inbox.take(0) == [] and inbox.take(0.01) == [] and inbox.empty()
    inbox.put(1)
    inbox.put(2)
    assert not inbox.empty()
    assert inbox.take(0) == [1, 2] and inbox.empty()
    both = threading.Event()

    def produce() -> None:  # on a thread of its own, as a library's worker
        inbox.put(3)
        both.wait()
        inbox.put(4)

    worker = threading.Thread(target=produce)
    worker.start()
    assert inbox.take(None) == [3]  # blocks until the worker's first event, no longer
    both.set()
    worker.join()
    assert inbox.take(None) == [4]
