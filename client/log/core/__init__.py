"""The pure core of logs: metadata values and the transforms that change them (no I/O, time as argument)."""
