"""Units and manifests for running the platform's services on hosts of their own (docs/deploy.md)."""
