"""Autorecovery: the auditor (elected singleton) and the replication worker, run by one daemon per bookie."""
