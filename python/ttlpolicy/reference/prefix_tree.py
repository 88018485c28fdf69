"""Prefix tree and group TTL (issue 4): filled in by the Kareto work."""
