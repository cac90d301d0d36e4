#!/usr/bin/env python3
"""CDK entry point: read settings, build the stack, check it with cdk-nag (AwsSolutions and our EksV2 rules)."""

import sys

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.eks_nag import EksV2Checks
from stacks.context import settings_from_context
from stacks.settings import SettingsError
from stacks.training_cluster import EfaTrainingStack

app = cdk.App()
try:
    settings = settings_from_context(app.node.get_all_context())
except SettingsError as error:
    sys.exit(f"error: {error}")
EfaTrainingStack(app, settings.stack_name, settings)
cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
# cdk-nag's EKS rules do not see the aws_eks_v2 cluster; ours do (stacks/eks_nag.py).
cdk.Aspects.of(app).add(EksV2Checks(verbose=True))
app.synth()
