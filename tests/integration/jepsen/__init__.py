"""A Jepsen-style check of log producers, transactions and cursors on real processes (issue 44 item 5):
workers (`worker`), their histories (`history`), the nemesis (`nemesis`) and the checker (`checker`)."""
