"""The operations dashboard and the watch service's HTTP API."""
