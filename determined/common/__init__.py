"""Shared plumbing below the Core API: the master client, storage backends, paths."""
