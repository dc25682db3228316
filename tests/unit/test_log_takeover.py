"""R28 as the log layer's rule (`client.log.core.takeover`): a new log writer seals the previous tail with a
fencing recovery; only the rule switched off (the log-no-fence mutant) takes a plain LAC read instead."""

from __future__ import annotations

from bkledger.client.log.core.takeover import DEFAULT_LOG_RULES, LogRules, TailSeal, tail_seal


def test_the_previous_tail_is_sealed_by_recovery_unless_the_rule_is_off():
    assert tail_seal() is TailSeal.RECOVER
    assert tail_seal(DEFAULT_LOG_RULES) is TailSeal.RECOVER
    assert tail_seal(LogRules(fence_previous_tail=False)) is TailSeal.READ_LAC
