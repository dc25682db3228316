"""ClientConfig.from_options: strings as Spark options give them, booleans included; typed errors."""

from __future__ import annotations

import pytest

from bkledger.client.config import ClientConfig
from bkledger.client.errors import InvalidOptionError


@pytest.mark.parametrize(("raw", "expected"), [("false", False), ("False", False), ("0", False), ("true", True),
                                               (True, True), (False, False)])
def test_boolean_settings_parse_words_not_truthiness(raw: object, expected: bool) -> None:
    assert ClientConfig.from_options({"gcFreezeOnStart": raw}).gcFreezeOnStart is expected


def test_a_bad_boolean_names_the_setting() -> None:
    with pytest.raises(InvalidOptionError, match="gcFreezeOnStart must be a bool"):
        ClientConfig.from_options({"gcFreezeOnStart": "sometimes"})
