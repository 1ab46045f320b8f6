"""The example CDK app (infra/cdk/app.py runs it): Fireline in a stack of its own, with an
alarm topic, a few props set, and cdk-nag's AwsSolutions checks on the whole app.

`cdk synth` and `cdk deploy` (from infra/cdk) or `make cdk-synth` (offline, into cdk.out/)
run it. The context value ``fireline:bundle-dependencies=false`` packages the code
without its requirements: what the tests and the local cloud need, not AWS.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks

from fireline_cdk import ApiThrottling, Fireline, MemorySizes, TenantQuotas, UsagePlan

STACK_NAME = "Fireline"
BUNDLE_CONTEXT = "fireline:bundle-dependencies"


class FirelineStack(cdk.Stack):
    def __init__(self, scope: cdk.App, construct_id: str, *, bundle_dependencies: bool) -> None:
        super().__init__(
            scope, construct_id, description="Fireline: a serverless job scheduler (CDK example)"
        )
        # CloudWatch publishes alarms to an encrypted topic only with a customer managed
        # key whose policy lets it use the key (the AWS managed SNS key does not).
        key = kms.Key(self, "AlarmKey", enable_key_rotation=True, description="Fireline alarms")
        cloudwatch = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        key.grant(cloudwatch, "kms:Decrypt", "kms:GenerateDataKey*")
        topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True)
        topic.grant_publish(cloudwatch)

        self.scheduler = Fireline(
            self,
            "Scheduler",
            alarm_topic=topic,
            ticker_groups=2,
            tenant_concurrency_limit=20,
            lag_alarm_threshold_seconds=5,
            memory_sizes=MemorySizes(worker=1024, workflow=2048),
            log_retention_days=90,
            api_throttling=ApiThrottling(rate_limit=200, burst_limit=400),
            usage_plan=UsagePlan(rate_limit=20, burst_limit=40),
            tenant_quotas=TenantQuotas(schedules=5000, uploads_per_day=100),
            bundle_dependencies=bundle_dependencies,
        )
        cdk.CfnOutput(self, "AlarmTopicArn", value=topic.topic_arn)


def build(outdir: str | None = None, *, bundle_dependencies: bool | None = None) -> cdk.App:
    app = cdk.App(outdir=outdir)
    if bundle_dependencies is None:
        bundle_dependencies = str(app.node.try_get_context(BUNDLE_CONTEXT)) != "false"
    FirelineStack(app, STACK_NAME, bundle_dependencies=bundle_dependencies)
    # Synthesis fails on any finding not acknowledged with a reason.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> None:
    build().synth()
