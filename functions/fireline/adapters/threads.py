"""ports.Parallel on a thread pool: the ticker's and workers' bounded concurrent I/O.

boto3 clients are thread-safe (resources and sessions are not; we use neither across
threads), and each AWS call spends its time waiting on the network, so a few dozen
threads overlap a few dozen calls even under the GIL.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

R = TypeVar("R")


class ThreadPool:
    def __init__(self, max_workers: int = 32, name: str = "fireline-io") -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=name
        )

    def run(self, calls: Sequence[Callable[[], R]]) -> list[R | Exception]:
        if len(calls) == 1:  # no hand-off for a single call
            try:
                return [calls[0]()]
            except Exception as exc:  # handed back as the call's outcome
                return [exc]
        futures = [self._pool.submit(call) for call in calls]
        results: list[R | Exception] = []
        for future in futures:
            try:
                results.append(future.result())
            except Exception as exc:  # handed back as the call's outcome
                results.append(exc)
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> ThreadPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
