"""A ticker's stale view: what it read at one moment, acted on later."""

from __future__ import annotations

from typing import Any

from fireline.domain import model


class FrozenReads:
    """A schedule store that answers reads as they were at capture time (a stale view)."""

    def __init__(self, store: Any, until: Any) -> None:
        self._store = store
        self._due = {s: store.due(s, until=until, limit=500) for s in range(model.DEFAULT_SHARDS)}
        keys = [(e.tenant_id, e.schedule_id) for page in self._due.values() for e in page.items]
        self._items = {(s.tenant_id, s.schedule_id): s for s in store.get_many(keys)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due(self, shard: int, **_: Any) -> Any:
        return self._due[shard]

    def get_many(self, keys: Any) -> Any:
        return [self._items[k] for k in keys if k in self._items]
