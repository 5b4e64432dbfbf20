"""The data bus gateway: services publish events over HTTP without knowing Kafka."""
