"""Logs made of ledgers (R27-R30): placeholder until the log module lands."""

from __future__ import annotations


class LogsMixin:
    """Log operations of BookKeeper (open_log_writer, open_log_reader, truncate_log, list_logs)."""
