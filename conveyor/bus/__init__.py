"""The bus: what services ask of the platform, granted without a platform file edit (topic requests)."""
