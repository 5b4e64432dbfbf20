"""Topics: contracts and the provisioner that makes every cluster match platform.yaml."""
