"""Throttling of lagging consumers while a broker is busy: rules (``policy``), signals, controller,
and the service that runs it (``ops throttle``)."""
