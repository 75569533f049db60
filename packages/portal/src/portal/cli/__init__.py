"""``portal``: the command line."""
