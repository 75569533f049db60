"""Acme object storage for Portal: ``acme://BUCKET/PREFIX`` URLs (see plugin.py)."""
