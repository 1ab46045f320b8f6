"""moto's TransactWriteItems at the cost of the items it touches.

To roll a failed transaction back, moto deep-copies every table the transaction touches,
once per item in it: each transaction costs O(items in the table). A workflow run applies
one transaction per node, so a 2,000-node run on moto spent most of its time copying the
table (quadratic). This keeps moto's semantics (conditions, all-or-nothing, cancellation
reasons) and rolls back from a snapshot of the touched items instead.
"""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Iterator
from typing import Any
from unittest import mock


@contextlib.contextmanager
def item_scoped_transactions() -> Iterator[None]:
    from moto.dynamodb import models

    original = models.DynamoDBBackend.transact_write_items

    def keep_tables(value: Any) -> Any:
        # The whole-table backup becomes the table itself (restoring it is a no-op);
        # anything else is copied as before.
        return value if isinstance(value, models.Table) else copy.deepcopy(value)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        touched: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        for entry in transact_items:
            op = next(iter(entry.values()))
            name = op.get("TableName")
            if not name or name not in self.tables:
                continue
            table = self.tables[name]
            key = op.get("Key") or {
                attr: op["Item"][attr]
                for attr in (table.hash_key_attr, table.range_key_attr)
                if attr is not None and attr in op.get("Item", {})
            }
            with contextlib.suppress(Exception):  # a malformed key: moto itself refuses it
                before = self.get_item(name, key)
                touched.append((name, key, before.to_json()["Attributes"] if before else None))
        with mock.patch.object(models, "copy", types.SimpleNamespace(deepcopy=keep_tables)):
            try:
                original(self, transact_items)
            except Exception:
                for name, key, attrs in reversed(touched):
                    if attrs is None:
                        if self.get_item(name, key) is not None:
                            self.delete_item(name, key)
                    else:
                        self.put_item(name, attrs)
                raise

    with mock.patch.object(models.DynamoDBBackend, "transact_write_items", transact_write_items):
        yield
