"""Settings every test shares: a fake AWS identity, so nothing can reach a real account."""

from __future__ import annotations

import functools
import os

import botocore.session

# Set before any boto3 client exists. moto intercepts every call; these only make sure a
# forgotten mock fails on bad credentials instead of touching an account.
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_SECURITY_TOKEN="testing",
    AWS_SESSION_TOKEN="testing",
    AWS_DEFAULT_REGION="us-east-1",
    POWERTOOLS_METRICS_NAMESPACE="Fireline",
    POWERTOOLS_SERVICE_NAME="fireline",
)
os.environ.pop("AWS_PROFILE", None)

# One botocore data loader for every session of the test process: each moto mock starts a
# new default session, and each new session would parse the service models' JSON again
# (about 0.15 s of CPU a client; thousands of clients in the suite).
botocore.session.create_loader = functools.cache(botocore.session.create_loader)
