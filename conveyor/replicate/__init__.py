"""Federation replicator: each writable cluster copied into the central cluster, exactly once,
while topics and workers come and go (MISSION.md sections 4 and 5)."""
