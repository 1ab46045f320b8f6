"""us-east-1 list prices, each with the day it was read and where.

One file, so a price change is one edit here and every figure (the benchmark's, the
documentation's) follows. On-demand, no free tier (a deployment at scale is past it), except
where a price says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    usd: float  # per `unit`
    unit: str
    read_on: str  # the day the price was read (ISO date)
    source: str  # where


MILLION = 1_000_000.0
GB = 1024.0**3

DYNAMODB_WRITE_REQUEST_UNIT = Price(
    0.625 / MILLION,
    "write request unit (1 KB, on-demand)",
    "2026-12-02",
    # Halved on 2024-11-01 from $1.25/M.
    "https://aws.amazon.com/dynamodb/pricing/on-demand/",
)
DYNAMODB_READ_REQUEST_UNIT = Price(
    0.125 / MILLION,
    "read request unit (4 KB strongly consistent, on-demand)",
    "2026-12-02",
    # Halved on 2024-11-01 from $0.25/M.
    "https://aws.amazon.com/dynamodb/pricing/on-demand/",
)
SQS_REQUEST = Price(
    0.40 / MILLION,
    "standard queue request (each 64 KB chunk of a payload is one request)",
    "2026-12-02",
    "https://aws.amazon.com/sqs/pricing/",
)
LAMBDA_REQUEST = Price(
    0.20 / MILLION, "invocation", "2026-12-02", "https://aws.amazon.com/lambda/pricing/"
)
LAMBDA_GB_SECOND_ARM = Price(
    0.0000133334,
    "GB-second, arm64 (first 7.5 billion GB-s a month)",
    "2026-12-02",
    "https://aws.amazon.com/lambda/pricing/",
)
LAMBDA_GB_SECOND_X86 = Price(
    0.0000166667,
    "GB-second, x86_64 (first 6 billion GB-s a month)",
    "2026-12-02",
    "https://aws.amazon.com/lambda/pricing/",
)
CLOUDWATCH_LOGS_INGESTION = Price(
    0.50 / GB,
    "byte ingested (standard log class, $0.50/GB)",
    "2026-12-02",
    "https://aws.amazon.com/cloudwatch/pricing/",
)
EVENTBRIDGE_SCHEDULER_INVOCATION = Price(
    1.00 / MILLION,
    "scheduled invocation (after 14 million free a month)",
    "2026-12-02",
    "https://aws.amazon.com/eventbridge/pricing/",
)
# The deployed API is a REST API (usage plans, a Lambda authorizer): the first 333 million
# requests of a month at this rate, less past that. The authorizer's invocations are cached
# per key (AuthorizerCacheTtlSeconds) and not counted per request.
API_GATEWAY_REST_REQUEST = Price(
    3.50 / MILLION,
    "REST API request (first 333 million a month)",
    "2026-12-02",
    "https://aws.amazon.com/api-gateway/pricing/",
)
STEP_FUNCTIONS_STATE_TRANSITION = Price(
    25.0 / MILLION,
    "standard workflow state transition",
    "2026-12-02",
    "https://aws.amazon.com/step-functions/pricing/",
)
# The dispatch targets' calls, billed to the account that owns the state machine, bus or
# topic (the tenant's, called as its role). A standard state machine bills no request but
# its own state transitions (STEP_FUNCTIONS_STATE_TRANSITION, as many as the tenant's
# definition takes); an express one bills this request and its duration: the request is
# what a start costs whatever the machine does.
STEP_FUNCTIONS_EXPRESS_REQUEST = Price(
    1.00 / MILLION,
    "express workflow request (StartExecution)",
    "2026-12-03",
    "https://aws.amazon.com/step-functions/pricing/",
)
EVENTBRIDGE_CUSTOM_EVENT = Price(
    1.00 / MILLION,
    "custom event put (PutEvents; each 64 KB chunk of an entry is one event)",
    "2026-12-03",
    "https://aws.amazon.com/eventbridge/pricing/",
)
SNS_PUBLISH_REQUEST = Price(
    0.50 / MILLION,
    "standard topic request (Publish; each 64 KB chunk is one request; deliveries to SQS "
    "and Lambda free, the first million requests a month free)",
    "2026-12-03",
    "https://aws.amazon.com/sns/pricing/",
)
S3_PUT_REQUEST = Price(
    0.005 / 1000,
    "PUT, COPY, POST or LIST request (S3 Standard)",
    "2026-12-02",
    "https://aws.amazon.com/s3/pricing/",
)
S3_GET_REQUEST = Price(
    0.0004 / 1000,
    "GET, SELECT and other request (S3 Standard)",
    "2026-12-02",
    "https://aws.amazon.com/s3/pricing/",
)
SECRETS_MANAGER_API_CALL = Price(
    0.05 / 10_000,
    "API call",
    "2026-12-02",
    "https://aws.amazon.com/secrets-manager/pricing/",
)
# X-Ray bills each trace once, however many segments (functions) it holds.
XRAY_TRACE_RECORDED = Price(
    5.00 / MILLION,
    "trace recorded (the first 100,000 a month free)",
    "2026-12-03",
    "https://aws.amazon.com/xray/pricing/",
)
XRAY_TRACE_RETRIEVED = Price(
    0.50 / MILLION,
    "trace retrieved or scanned (the first 1,000,000 a month free)",
    "2026-12-03",
    "https://aws.amazon.com/xray/pricing/",
)
# STS AssumeRole is free; a tenant's role is assumed once an hour per worker anyway.
STS_REQUEST = Price(0.0, "request", "2026-12-02", "https://aws.amazon.com/iam/pricing/")

LAMBDA_GB_SECOND = {"arm64": LAMBDA_GB_SECOND_ARM, "x86_64": LAMBDA_GB_SECOND_X86}
# S3 bills writes and lists at the PUT rate, everything else at the GET rate.
S3_PUT_CLASS = frozenset(
    {"PutObject", "CopyObject", "PostObject", "ListObjects", "ListObjectsV2",
     "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"}
)  # fmt: skip


def all_prices() -> dict[str, Price]:
    """Every price by name (the benchmark report lists them beside its figures)."""
    return {name: value for name, value in globals().items() if isinstance(value, Price)}
