"""Outbound network access: the one policy every server-side fetch obeys (policy.py)."""
