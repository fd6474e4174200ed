"""A progress bar on stderr (tqdm, when installed and wanted); otherwise silent."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    def __init__(self, enabled: bool) -> None:
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(unit="run", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    def stage(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description(text)

    def tick(self, **postfix: Any) -> None:
        if self._bar is not None:
            self._bar.update(1)
            if postfix:
                self._bar.set_postfix(postfix)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextmanager
def progress(enabled: bool) -> Iterator[Progress]:
    bar = Progress(enabled)
    try:
        yield bar
    finally:
        bar.close()
