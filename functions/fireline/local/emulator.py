"""What the embedded emulator (moto) lacks of DynamoDB's guarantees, given back to it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

# moto's item calls: each is one atomic step in DynamoDB.
ITEM_CALLS = (
    "put_item",
    "update_item",
    "delete_item",
    "transact_write_items",
    "get_item",
    "query",
    "scan",
    "batch_get_item",
)


@contextlib.contextmanager
def atomic_item_calls() -> Iterator[None]:
    """DynamoDB applies each item write atomically (condition check and write together)
    and a read sees an item before or after a write, never half of one. moto has no lock:
    two threads of its server (or of a process using it in memory) could both pass a
    condition, or read an item an update is still filling in (a row without its
    attributes, which the API answered with a 502). One lock around moto's item calls
    gives DynamoDB's guarantee, while this context lasts."""
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    with contextlib.ExitStack() as patches:
        for name in ITEM_CALLS:
            original = getattr(DynamoDBBackend, name)

            def locked(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                with lock:
                    return _original(*args, **kwargs)

            patches.enter_context(mock.patch.object(DynamoDBBackend, name, locked))
        yield
