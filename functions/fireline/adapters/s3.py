"""S3 implementation of the DocumentStore port: workflow definitions and client uploads.

The client is injected (only ``wiring`` builds it). A definition is written once under
its own versioned key and never changed, so a read needs no version check.

Build the client with ``Config(signature_version="s3v4")``: without it botocore still
presigns URLs with Signature Version 2 in us-east-1, which S3 refuses for newer buckets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

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


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


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
            if _code(exc) in _MISSING:
                return None
            if _code(exc) in _RETRYABLE:
                raise errors.Unavailable(f"S3 is unavailable ({_code(exc)})") from exc
            raise
        with response["Body"] as body:
            return body.read()

    def upload_url(self, key: str, *, expires_seconds: int) -> str:
        if not 1 <= expires_seconds <= MAX_EXPIRES_SECONDS:
            raise errors.ValidationError(
                f"must be between 1 and {MAX_EXPIRES_SECONDS}", field="expires_seconds"
            )
        # Signed locally: no request to S3. The client PUTs the body to it as it is.
        return self._client.generate_presigned_url(
            "put_object",
            Params={"Bucket": self._bucket, "Key": key},
            ExpiresIn=expires_seconds,
        )
