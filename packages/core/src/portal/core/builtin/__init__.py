"""portal-core's built-in plugins, registered exactly as third-party plugins are."""
