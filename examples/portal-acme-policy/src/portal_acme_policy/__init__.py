"""Acme's placement policy for Portal (see plugin.py)."""
