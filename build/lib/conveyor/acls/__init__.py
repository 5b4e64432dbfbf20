"""Kafka principals and ACLs derived from platform.yaml (``conveyor acl plan|apply``)."""
