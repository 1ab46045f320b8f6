"""S3 implementation of the DocumentStore port: workflow definitions and client uploads.

Clients upload with a presigned POST whose policy limits the key, the content type and
the size; the API reads an upload's size from its metadata (HeadObject) before any of its
body, then the body in chunks, conditional on the object being the one it sized.

The client is injected (only ``wiring`` builds it). A definition is written once under
its own versioned key and never changed, so a read needs no version check.

Build the client with ``Config(signature_version="s3v4")``: without it botocore still
presigns URLs with Signature Version 2 in us-east-1, which S3 refuses for newer buckets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fireline import ports
from fireline.domain import errors

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

# S3 answers a missing object with NoSuchKey (GetObject), or a bare 404 when the caller
# may not list the bucket.
_MISSING = {"NoSuchKey", "404", "NotFound"}
_RETRYABLE = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500"}
# A presigned URL signed with a role's (temporary) credentials stops working when they do;
# S3 caps the signature itself at 7 days.
MAX_EXPIRES_SECONDS = 7 * 24 * 3600
# An upload is read in pieces this large: memory grows with what the parse keeps, never
# with a body larger than the size its metadata said.
CHUNK_BYTES = 1024 * 1024


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _missing(exc: ClientError) -> bool:
    """Whether S3 answered that the object does not exist; a throttling or failing S3
    raises errors.Unavailable (retry later) instead."""
    if _code(exc) in _RETRYABLE:
        raise errors.Unavailable(f"S3 is unavailable ({_code(exc)})") from exc
    return _code(exc) in _MISSING


class S3DocumentStore:
    def __init__(self, client: S3Client, bucket: str) -> None:
        self._client = client
        self._bucket = bucket

    def put(self, key: str, body: bytes) -> None:
        try:
            self._client.put_object(
                Bucket=self._bucket, Key=key, Body=body, ContentType="application/json"
            )
        except ClientError as exc:
            if _code(exc) in _RETRYABLE:
                raise errors.Unavailable(f"S3 is unavailable ({_code(exc)})") from exc
            raise

    def get(self, key: str) -> bytes | None:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if _missing(exc):
                return None
            raise
        with response["Body"] as body:
            return body.read()

    def upload_form(
        self, key: str, *, expires_seconds: int, max_bytes: int, content_type: str
    ) -> ports.UploadForm:
        if not 1 <= expires_seconds <= MAX_EXPIRES_SECONDS:
            raise errors.ValidationError(
                f"must be between 1 and {MAX_EXPIRES_SECONDS}", field="expires_seconds"
            )
        # Signed locally: no request to S3. S3 checks the policy's conditions when the
        # form arrives (a presigned PUT can carry no size limit): this key only, this
        # content type only, 1 to max_bytes bytes; anything else is refused, not stored.
        post = self._client.generate_presigned_post(
            Bucket=self._bucket,
            Key=key,
            Fields={"Content-Type": content_type},
            Conditions=[
                {"Content-Type": content_type},
                ["content-length-range", 1, max_bytes],
            ],
            ExpiresIn=expires_seconds,
        )
        return ports.UploadForm(url=post["url"], fields=dict(post["fields"]))

    def describe(self, key: str) -> ports.DocumentInfo | None:
        try:
            head = self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if _missing(exc):
                return None
            raise
        return ports.DocumentInfo(
            size=int(head["ContentLength"]),
            content_type=str(head.get("ContentType", "")),
            etag=str(head["ETag"]),
        )

    def chunks(self, key: str, *, etag: str) -> Iterator[bytes]:
        try:
            # IfMatch: the body read is the object whose size was checked, not one put
            # over it since (S3 answers 412 then).
            response = self._client.get_object(Bucket=self._bucket, Key=key, IfMatch=etag)
        except ClientError as exc:
            if _code(exc) in ("PreconditionFailed", "412"):
                raise errors.ConflictError(f"document {key} was replaced meanwhile") from exc
            if _missing(exc):
                raise errors.NotFound(f"no document {key}") from exc
            raise
        body = response["Body"]
        try:
            yield from body.iter_chunks(CHUNK_BYTES)
        finally:
            body.close()
