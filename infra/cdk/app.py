"""The example CDK app, for `cdk synth` and `cdk deploy` (see cdk.json and docs/deploy.md).

The stack is defined in fireline_cdk/example.py, where it is linted and type-checked.
"""

from fireline_cdk import example

example.main()
