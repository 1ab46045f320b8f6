"""SQS implementation of the WorkQueue port: one queue (and dead-letter queue) per class."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as NetworkError

from fireline import ports
from fireline.domain import errors

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
else:
    SQSClient = Any

MAX_BATCH = 10
MAX_BODY_BYTES = 256 * 1024
MAX_DELAY_SECONDS = 900
_RETRYABLE = {"ThrottlingException", "RequestThrottled", "ServiceUnavailable", "InternalError"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class SqsWorkQueue:
    def __init__(
        self,
        client: SQSClient,
        queue_urls: Mapping[str, str],
        dead_letter_urls: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._urls = dict(queue_urls)
        self._dead = dict(dead_letter_urls or {})

    def _url(self, job_class: str, urls: Mapping[str, str] | None = None) -> str:
        try:
            return (urls or self._urls)[job_class]
        except KeyError as exc:
            raise errors.ValidationError(
                f"no queue for class {job_class!r}", field="job_class"
            ) from exc

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        if not 1 <= len(messages) <= MAX_BATCH:
            raise errors.ValidationError(
                f"a batch holds 1 to {MAX_BATCH} messages", field="messages"
            )
        entries = []
        for position, message in enumerate(messages):
            body = json.dumps(message.body, separators=(",", ":"))
            if len(body.encode()) > MAX_BODY_BYTES:
                raise errors.ValidationError("exceeds 256 KiB", field="body")
            if not 0 <= message.delay_seconds <= MAX_DELAY_SECONDS:
                raise errors.ValidationError("must be 0 to 900", field="delay_seconds")
            entries.append(
                {
                    "Id": message.id or str(position),
                    "MessageBody": body,
                    "DelaySeconds": message.delay_seconds,
                }
            )
        try:
            response = self._client.send_message_batch(
                QueueUrl=self._url(job_class),
                Entries=entries,  # type: ignore[arg-type]
            )
        except ClientError as exc:
            if _code(exc) in _RETRYABLE:
                raise errors.Unavailable(f"SQS is unavailable ({_code(exc)})") from exc
            raise
        except (NetworkError, HTTPClientError) as exc:
            # The batch may or may not have gone in: resending it duplicates at most
            # messages, which the worker's claim absorbs.
            raise errors.Unavailable(f"SQS did not answer ({type(exc).__name__})") from exc
        return [failure["Id"] for failure in response.get("Failed", [])]

    def receive(
        self, job_class: str, *, max_messages: int = 10, visibility_timeout: int | None = None
    ) -> list[ports.ReceivedMessage]:
        return self._receive(self._url(job_class), max_messages, visibility_timeout)

    def _receive(
        self, url: str, max_messages: int, visibility_timeout: int | None, wait: int = 0
    ) -> list[ports.ReceivedMessage]:
        kwargs: dict[str, Any] = {
            "QueueUrl": url,
            "MaxNumberOfMessages": max_messages,
            "MessageSystemAttributeNames": ["ApproximateReceiveCount", "SentTimestamp"],
            "WaitTimeSeconds": wait,
        }
        if visibility_timeout is not None:
            kwargs["VisibilityTimeout"] = visibility_timeout
        response = self._client.receive_message(**kwargs)
        return [
            ports.ReceivedMessage(
                message_id=m["MessageId"],
                receipt=m["ReceiptHandle"],
                body=json.loads(m["Body"]),
                receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
                attributes={str(k): v for k, v in m.get("Attributes", {}).items()},
            )
            for m in response.get("Messages", [])
        ]

    def delete(self, job_class: str, receipt: str) -> None:
        self._client.delete_message(QueueUrl=self._url(job_class), ReceiptHandle=receipt)

    def change_visibility(self, job_class: str, receipt: str, seconds: int) -> None:
        try:
            self._client.change_message_visibility(
                QueueUrl=self._url(job_class), ReceiptHandle=receipt, VisibilityTimeout=seconds
            )
        except ClientError as exc:
            if _code(exc) in (
                "ReceiptHandleIsInvalid",
                "MessageNotInflight",
                "InvalidParameterValue",
            ):
                raise errors.NotFound("the receipt is stale") from exc
            raise

    def load(self, job_class: str) -> ports.QueueLoad:
        attributes = self._client.get_queue_attributes(
            QueueUrl=self._url(job_class),
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesDelayed",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )["Attributes"]
        return ports.QueueLoad(
            ready=int(attributes.get("ApproximateNumberOfMessages", "0")),
            delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", "0")),
            in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", "0")),
        )

    def dead_letters(
        self, job_class: str, *, max_messages: int = 10
    ) -> list[ports.ReceivedMessage]:
        # Visibility 0: look without taking them, so a peek never hides a dead letter.
        return self._receive(self._url(job_class, self._dead), max_messages, 0)
