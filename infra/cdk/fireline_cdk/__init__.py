"""Fireline for CDK apps: the SAM template (infra/template.yaml) as a construct.

``Fireline(stack, "Scheduler", alarm_topic=topic, tenant_concurrency_limit=20)`` adds the
same resources a `sam deploy` of the template creates, with the props mapped onto the
template's parameters. See ``fireline_cdk.construct``.
"""

from __future__ import annotations

from fireline_cdk.construct import (
    PROP_PARAMETERS,
    ApiThrottling,
    Fireline,
    MemorySizes,
    TenantQuotas,
    UsagePlan,
)

__all__ = [
    "PROP_PARAMETERS",
    "ApiThrottling",
    "Fireline",
    "MemorySizes",
    "TenantQuotas",
    "UsagePlan",
]
