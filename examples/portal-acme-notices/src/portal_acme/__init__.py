"""An example third-party Portal plugin (see README.md)."""
