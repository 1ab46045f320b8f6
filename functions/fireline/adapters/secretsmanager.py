"""Secrets Manager implementation of the SigningKeyStore port: one secret per tenant.

The secret ``<prefix><tenant id>`` holds the tenant's key ring as JSON (every key valid,
with its id and end). Each rotation is a new version of the same secret, so Secrets
Manager's version history is the ring's. The workers may read secrets under the prefix
and nothing else (infra/template.yaml); only the operator's command writes them.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as NetworkError

from fireline.domain import errors, signing

_RETRYABLE = {"ThrottlingException", "InternalServiceError", "LimitExceededException"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class SecretsManagerSigningKeys:
    def __init__(self, client: Any, prefix: str) -> None:
        if not prefix:
            raise errors.ValidationError("is not set", field="SIGNING_SECRET_PREFIX")
        self._client = client
        self.prefix = prefix

    def name(self, tenant_id: str) -> str:
        return f"{self.prefix}{tenant_id}"

    def get(self, tenant_id: str) -> signing.KeyRing | None:
        try:
            response = self._client.get_secret_value(SecretId=self.name(tenant_id))
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return None
            raise _translated(exc) from exc
        except (NetworkError, HTTPClientError) as exc:
            raise errors.Unavailable(f"Secrets Manager did not answer ({exc!r})") from exc
        return signing.KeyRing.from_json(response["SecretString"])

    def create(self, ring: signing.KeyRing) -> bool:
        try:
            # Create fails if the name exists: two first keys of one tenant created at
            # once end with one ring, the first one's.
            self._client.create_secret(
                Name=self.name(ring.tenant_id),
                Description=f"Fireline webhook signing keys of tenant {ring.tenant_id}",
                SecretString=ring.to_json(),
                Tags=[{"Key": "fireline:tenant", "Value": ring.tenant_id}],
            )
        except ClientError as exc:
            if _code(exc) == "ResourceExistsException":
                return False
            raise _translated(exc) from exc
        return True

    def replace(self, ring: signing.KeyRing) -> None:
        try:
            self._client.put_secret_value(
                SecretId=self.name(ring.tenant_id), SecretString=ring.to_json()
            )
        except ClientError as exc:
            raise _translated(exc) from exc


def _translated(exc: ClientError) -> Exception:
    code = _code(exc)
    if code in _RETRYABLE:
        return errors.Unavailable(f"Secrets Manager is unavailable ({code})")
    return exc
