"""CDK constructs of the EFA training cluster, one concern each."""
