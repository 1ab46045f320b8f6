"""Step Functions as the supervisor of long jobs (the LongJobRunner port)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fireline.domain import errors

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient
else:
    SFNClient = Any

# The task is gone: it timed out, its execution was stopped, or it already completed.
_GONE = {"TaskTimedOut", "TaskDoesNotExist", "InvalidToken", "ExecutionDoesNotExist"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class StepFunctionsLongJobs:
    def __init__(self, client: SFNClient, state_machine_arn: str) -> None:
        self._client = client
        self._arn = state_machine_arn

    def start(self, name: str, job_input: dict[str, Any]) -> str:
        try:
            response = self._client.start_execution(
                stateMachineArn=self._arn, name=name, input=json.dumps(job_input)
            )
        except ClientError as exc:
            if _code(exc) != "ExecutionAlreadyExists":
                raise
            # The name is deterministic: the execution exists (a repeat start with other
            # input, or one that already finished). It is the one to follow.
            region, account = self._arn.split(":")[3:5]
            machine = self._arn.split(":")[-1]
            return f"arn:aws:states:{region}:{account}:execution:{machine}:{name}"
        return response["executionArn"]

    def stop(self, execution: str, cause: str) -> None:
        try:
            self._client.stop_execution(executionArn=execution, cause=cause[:32_000])
        except ClientError as exc:
            if _code(exc) not in _GONE:
                raise

    def heartbeat(self, task_token: str) -> bool:
        return self._call(self._client.send_task_heartbeat, taskToken=task_token)

    def succeed(self, task_token: str, output: dict[str, Any]) -> bool:
        return self._call(
            self._client.send_task_success, taskToken=task_token, output=json.dumps(output)
        )

    def fail(self, task_token: str, error: str, cause: str) -> bool:
        return self._call(
            self._client.send_task_failure,
            taskToken=task_token,
            error=error[:256],
            cause=cause[:32_000],
        )

    @staticmethod
    def _call(method: Any, **kwargs: Any) -> bool:
        try:
            method(**kwargs)
        except ClientError as exc:
            if _code(exc) in _GONE:
                return False
            if _code(exc) in ("ThrottlingException", "ServiceUnavailable"):
                raise errors.Unavailable(f"Step Functions is unavailable ({_code(exc)})") from exc
            raise
        return True
