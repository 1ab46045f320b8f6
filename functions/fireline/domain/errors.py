"""One exception hierarchy for the whole package.

Handlers map these to responses by *type* (never by message text). Each class's docstring
is its default message, so ``raise NotFound()`` still says something useful.
"""

from __future__ import annotations


class FirelineError(Exception):
    """Fireline failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ValidationError(FirelineError):
    """The input is not valid."""

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        #: Dotted path of the field at fault (``spec``, ``timezone``, ``retry.max_attempts``).
        self.field = field

    @property
    def detail(self) -> str:
        """The message with every hint it carries, without the field (an API answer names
        the field apart)."""
        return self.message

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail


class TooLarge(ValidationError):
    """The input is larger than its limit."""


class OverridesFull(TooLarge):
    """The register of tenant limit overrides is full (DynamoDB's 400 KB item limit):
    nothing was written. Clear overrides no longer needed first."""

    def __init__(
        self, message: str | None = None, *, field: str | None = "concurrency_limit"
    ) -> None:
        super().__init__(message, field=field)


class ScheduleSyntaxError(ValidationError):
    """The schedule expression cannot be parsed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        field: str | None = "spec",
        part: str | None = None,
        position: int | None = None,
        suggestion: str | None = None,
    ) -> None:
        super().__init__(message, field=field)
        #: Which part of the expression is wrong (``minute``, ``day_of_week``, ``rate unit``).
        self.part = part
        #: 1-based position of that part in the expression (cron field number).
        self.position = position
        #: A form that would have been accepted, when we can guess one.
        self.suggestion = suggestion

    @property
    def detail(self) -> str:
        where = ""
        if self.part is not None:
            where = f" ({self.part}" + (f", field {self.position}" if self.position else "") + ")"
        hint = f"; try {self.suggestion!r}" if self.suggestion else ""
        return f"{self.message}{where}{hint}"


class UnknownTimeZone(ValidationError):
    """The time zone is not an IANA time zone name."""


class ScheduleNeverFires(ValidationError):
    """The schedule has no fire time (an impossible date, or a window that excludes all)."""


class NotFound(FirelineError):
    """The resource does not exist."""


class AlreadyExists(FirelineError):
    """The resource exists already."""


class ConflictError(FirelineError):
    """The resource changed since it was read (version mismatch)."""


class CorruptDefinition(FirelineError):
    """A stored workflow definition does not match the digest its own key names: it was
    changed after it was registered, and is never run."""


class IllegalTransition(FirelineError):
    """The occurrence cannot move from its current state to the requested one."""

    def __init__(self, current: object, requested: object) -> None:
        super().__init__(f"cannot move from {current} to {requested}")
        self.current = current
        self.requested = requested


class Unavailable(FirelineError):
    """A backing service is throttling or failing: retry later."""


class LeaseLost(FirelineError):
    """The lease is held by someone else or has expired: stop writing at once."""


class MissingIdempotencyKey(FirelineError):
    """The message carries no occurrence key, so it cannot be run idempotently."""


class QuotaExceeded(FirelineError):
    """The tenant has used all of one of its quotas."""

    def __init__(
        self, quota: str, *, limit: int, used: int, retry_later: bool = False, asked: int = 1
    ) -> None:
        if asked > 1:
            message = f"the {quota} quota has no room for {asked} more: {used} of {limit} used"
        else:
            message = f"the {quota} quota is used up: {used} of {limit}"
        super().__init__(message)
        #: Which quota (``schedules``, ``active_jobs``, ``workflows``, ...).
        self.quota = quota
        self.limit = limit
        self.used = used
        #: True when waiting frees the quota by itself (a daily count), so a retry helps.
        self.retry_later = retry_later
