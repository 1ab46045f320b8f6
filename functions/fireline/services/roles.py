"""Assuming tenants' roles for their AWS targets, with the credentials cached.

A tenant's AWS target (Lambda, SQS, Step Functions, EventBridge, SNS) names a role in the
tenant's account; the worker calls the target as that role (see
``fireline.domain.aws_target``). The role trusts Fireline's target caller role with the
tenant id as ExternalId, so Fireline, the only one who sends
the ExternalId, cannot be made to use one tenant's role for another (the confused deputy
the ExternalId exists for), and the session name tells the tenant's CloudTrail which
tenant's job made each call.

Credentials are kept per (role, tenant) until a margin before they expire: one STS call
per role and container per hour, not one per job.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# STS's limits: a session name is 2-64 of [\w+=,.@-]; one hour is the longest session a
# chained role may have (the target caller role is the first link).
SESSION_SECONDS = 3600
# Credentials are renewed this long before they expire, so a call never starts with
# credentials that lapse while it runs (a Lambda target may run 15 minutes).
RENEW_MARGIN_SECONDS = 16 * 60
_SESSION_CHARS = re.compile(r"[^\w+=,.@-]")


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: float  # unix seconds


def session_name(tenant_id: str) -> str:
    """``fireline-<tenant>``, in STS's characters and length."""
    return _SESSION_CHARS.sub("-", f"fireline-{tenant_id}")[:64]


class RoleAssumer:
    """Credentials for (role, tenant), from STS, cached until near expiry.

    ``sts`` builds an STS client: with None, as the worker itself; with credentials, as
    them. ``caller_role_arn``, when set, is assumed first (the one role every tenant's
    trust policy names), and tenants' roles are assumed from it."""

    def __init__(
        self,
        sts: Callable[[Credentials | None], Any],
        *,
        caller_role_arn: str = "",
        now: Callable[[], float] = time.time,
        margin_seconds: float = RENEW_MARGIN_SECONDS,
    ) -> None:
        self._sts = sts
        self._caller = caller_role_arn
        self._now = now
        self._margin = margin_seconds
        self._cache: dict[tuple[str, str], Credentials] = {}
        self._lock = threading.Lock()
        #: STS AssumeRole calls made (cache misses).
        self.assumed = 0

    def credentials(self, role_arn: str, tenant_id: str) -> Credentials:
        via = self._cached(self._caller, "", None) if self._caller else None
        return self._cached(role_arn, tenant_id, via)

    def _cached(self, role_arn: str, tenant_id: str, via: Credentials | None) -> Credentials:
        key = (role_arn, tenant_id)
        with self._lock:
            held = self._cache.get(key)
        if held is not None and held.expires_at - self._margin > self._now():
            return held
        kwargs: dict[str, Any] = {
            "RoleArn": role_arn,
            "RoleSessionName": session_name(tenant_id) if tenant_id else "fireline-worker",
            "DurationSeconds": SESSION_SECONDS,
        }
        if tenant_id:
            kwargs["ExternalId"] = tenant_id
        answer = self._sts(via).assume_role(**kwargs)["Credentials"]
        expiration = answer["Expiration"]
        fresh = Credentials(
            access_key_id=answer["AccessKeyId"],
            secret_access_key=answer["SecretAccessKey"],
            session_token=answer["SessionToken"],
            expires_at=expiration.timestamp()
            if isinstance(expiration, datetime)
            else float(expiration),
        )
        with self._lock:
            self._cache[key] = fresh
            self.assumed += 1
        return fresh
