"""Throttling of lagging consumers while a broker is busy: rules (``policy``), signals, controller."""
