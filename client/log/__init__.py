"""Logs made of ledgers (R27-R30): the log package.

- `client.log.core`: the pure part (log metadata, its stored form and transforms; no I/O, no clock).
- `client.log.logs`: the log operations `BookKeeper` gets (LogsMixin), append_ledgers, retention.
- `client.log.writer` / `client.log.reader`: LogWriter and LogReader.
"""
