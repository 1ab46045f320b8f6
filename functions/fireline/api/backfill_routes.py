"""The backfill routes: start one over a past range, read its progress, cancel it.

A retried POST (a lost answer) is a backfill of its own that creates nothing: every fire
of the range has its row by then, so it answers ``created: 0`` and runs nothing again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.models import Example
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from fireline.api import document, models
from fireline.domain import backfill
from fireline.services.backfills import Backfills

ID = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
INSTANT: JsonDict = {"format": "date-time"}


class BackfillIn(BaseModel):
    """Read as text and parsed by the API, so a bad instant or policy is a 400 naming its
    field (as a bad spec or time zone is), not a mismatch with the document."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: str = Field(
        alias="from",
        description="the first fire time included (ISO 8601 with a UTC offset)",
        json_schema_extra=INSTANT,
    )
    end: str = Field(
        alias="to",
        description="the end, excluded; not after now. At most "
        f"{backfill.MAX_FIRES} fires between the two",
        json_schema_extra=INSTANT,
    )
    overlap: str | None = Field(
        default=None,
        description=f"allow: up to {backfill.WINDOW} of its fires run side by side; "
        "buffer_all: one at a time, oldest first. Default: allow for a schedule whose overlap "
        "is allow, else buffer_all",
        json_schema_extra={"enum": [o.value for o in backfill.Overlap]},
    )

    def instants(self) -> tuple[datetime, datetime]:
        start = models.instant(self.start, "from")
        end = models.instant(self.end, "to")
        assert start is not None and end is not None
        return start, end


class BackfillOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str
    schedule_id: str
    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    overlap: str
    window: int = Field(description="the most of its fires released and unsettled at once")
    state: str = Field(description="running, cancelling, cancelled or done")
    version: int = Field(description="the schedule version its occurrences were written under")
    fires: int = Field(description="fire times in the range")
    created: int = Field(description="occurrences this backfill wrote")
    existed: int = Field(description="fires that had an occurrence already: not run again")
    released: int = Field(description="created occurrences sent to their queue")
    in_flight: int = Field(description="released and not settled")
    run: int = Field(description="released and settled (succeeded, dead, skipped, ...)")
    left: int = Field(description="created and not released yet")
    cancelled: int = Field(description="occurrences not started that a cancel stopped")
    created_at: datetime

    @classmethod
    def of(cls, item: backfill.Backfill) -> BackfillOut:
        return cls.model_validate(
            {"from": item.start, "to": item.end}
            | dict(
                id=item.backfill_id,
                schedule_id=item.schedule_id,
                overlap=item.overlap.value,
                window=item.window,
                state=item.state.value,
                version=item.version,
                fires=item.fires,
                created=item.created,
                existed=item.existed,
                released=item.released,
                in_flight=len(item.in_flight),
                run=item.run,
                left=item.left,
                cancelled=item.cancelled,
                created_at=item.created_at,
            )
        )


EXAMPLES = {
    "outage": Example(
        summary="Three hours after an outage",
        value={"from": "2026-12-01T02:00:00Z", "to": "2026-12-01T05:00:00Z"},
    )
}


def register(app: APIGatewayRestResolver, backfills: Backfills, tenant: Callable[[], str]) -> None:
    @app.post(
        "/schedules/<schedule_id>/backfill",
        summary="Run a schedule's fires over a past range, at a bounded pace",
        responses=document.success(202, BackfillOut),
    )
    def start_backfill(
        schedule_id: ID, body: Annotated[BackfillIn, Body(openapi_examples=EXAMPLES)]
    ) -> Response[str]:
        start, end = body.instants()
        started = backfills.start(tenant(), schedule_id, start=start, end=end, overlap=body.overlap)
        return Response(
            status_code=202,
            content_type=content_types.APPLICATION_JSON,
            body=BackfillOut.of(started).model_dump_json(by_alias=True),
        )

    @app.get("/schedules/<schedule_id>/backfill/<backfill_id>", summary="A backfill's progress")
    def get_backfill(schedule_id: ID, backfill_id: ID) -> BackfillOut:
        return BackfillOut.of(backfills.get(tenant(), schedule_id, backfill_id))

    @app.delete(
        "/schedules/<schedule_id>/backfill/<backfill_id>",
        summary="Cancel a backfill's fires not started (those running finish)",
    )
    def cancel_backfill(schedule_id: ID, backfill_id: ID) -> BackfillOut:
        return BackfillOut.of(backfills.cancel(tenant(), schedule_id, backfill_id))
