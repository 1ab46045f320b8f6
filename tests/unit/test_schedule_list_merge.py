"""A tenant's schedules lie on several partition keys (fireline.domain.model.tenant_key);
its list merges them by id under one cursor. A key whose read stops short of the limit
(DynamoDB's 1 MB a page: 250 schedules of 4 KB) must not let another key's larger ids
into the page, or the ids it left unread would fall behind the cursor and never be
listed. Counted on a stand-in for the DynamoDB client that pages as DynamoDB does."""

from __future__ import annotations

from typing import Any

from contract.support import a_schedule
from fireline.adapters import schedules_dynamodb
from fireline.adapters.dynamodb import _decode, _encode
from fireline.domain import model

TENANT = "tenant-a"


class PagingClient:
    """Query on the schedules table's key: ``page_items`` items at most a page, whatever
    the Limit (as a 1 MB page of large items holds fewer than asked)."""

    def __init__(self, items: list[model.Schedule], page_items: int) -> None:
        self.records = [_encode(schedules_dynamodb.schedule_to_item(i, 16)) for i in items]
        self.page_items = page_items
        self.queries = 0

    def query(self, **kwargs: Any) -> dict[str, Any]:
        self.queries += 1
        key = kwargs["ExpressionAttributeValues"][":pk"]["S"]
        after = kwargs.get("ExclusiveStartKey", {}).get("schedule_id", {}).get("S", "")
        on_key = sorted(
            (
                r
                for r in self.records
                if r["tenant_id"]["S"] == key and r["schedule_id"]["S"] > after
            ),
            key=lambda r: r["schedule_id"]["S"],
        )
        page = on_key[: min(kwargs["Limit"], self.page_items)]
        answer: dict[str, Any] = {"Items": page}
        if len(page) < len(on_key):
            last = _decode(page[-1])
            answer["LastEvaluatedKey"] = _encode(
                {"tenant_id": last["tenant_id"], "schedule_id": last["schedule_id"]}
            )
        return answer


def test_every_schedule_is_listed_once_in_order_when_a_keys_pages_stop_short() -> None:
    # GIVEN 400 schedules of one tenant over its keys, and pages of 5 items at most
    ids = [f"s{n:04d}" for n in range(400)]
    client = PagingClient([a_schedule(i, tenant_id=TENANT) for i in ids], page_items=5)
    assert len({r["tenant_id"]["S"] for r in client.records}) == model.TENANT_KEY_SHARDS
    store = schedules_dynamodb.DynamoScheduleStore(client, "schedules")  # type: ignore[arg-type]
    # WHEN the list is walked 50 at a time from cursor to cursor
    listed: list[str] = []
    cursor: str | None = None
    while True:
        page = store.list(TENANT, limit=50, cursor=cursor)
        listed += [s.schedule_id for s in page.items]
        assert all(s.tenant_id == TENANT for s in page.items)
        cursor = page.cursor
        if cursor is None:
            break
    # THEN every schedule was listed once, in id order
    assert listed == ids
    print(
        f"\n400 schedules over {model.TENANT_KEY_SHARDS} keys, pages of 5: {client.queries} queries"
    )
