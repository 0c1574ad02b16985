"""The trace service (W&B Weave's trace-server contract) under ``/traces``."""
