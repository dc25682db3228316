"""The pure protocol core of the client: write sets, quorums, digests, add/read/recovery state machines and
metadata transforms. No I/O, no clock, no randomness: events in, actions out (see DESIGN.md, layers)."""
