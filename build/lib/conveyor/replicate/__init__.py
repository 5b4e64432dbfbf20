"""Federation replicator: each writable cluster copied into the central cluster, exactly once,
while topics and workers come and go (docs/architecture.md, section 2)."""
