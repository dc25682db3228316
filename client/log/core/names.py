"""Which strings can name a log: ZooKeeper's character rules, a length limit, no path tricks. Pure.

A log lives in the znode `{root}/logs/<name>`, so its name must be one znode name that ZooKeeper stores as
given (ZooKeeper's `PathUtils.validatePath`; checked on ZooKeeper 3.9.5 with kazoo 2.11.0):
- not empty, at most MAX_LOG_NAME_LENGTH (249) characters, as Kafka's topic names;
- no '/' (it would nest the log under another name, and kazoo collapses '//' and strips a trailing '/', so
  two different names could reach one znode), and not '.' or '..' (relative path components);
- none of the characters ZooKeeper refuses: U+0000-U+001F, U+007F-U+009F, U+D800-U+F8FF (surrogates and
  private use; every character beyond U+FFFF, such as an emoji, is sent as a surrogate pair) and
  U+FFF0-U+FFFF.
Everything else is allowed: spaces, ':', '*', '?', accented letters, CJK, U+FEFF, "zookeeper".

`check_log_name(name)` is for a name that may create a log; `check_log_name(name, new=False)` for a name
that only finds one, where a name longer than 249 characters is let through (a log created before this
rule keeps working) up to what one ZooKeeper request can carry.
"""

from __future__ import annotations

from bkledger.client.errors import InvalidLogNameError

MAX_LOG_NAME_LENGTH = 249              # Kafka's limit on topic names (Topic.java)
MAX_STORED_NAME_BYTES = 0xFFFFF - 16 * 1024   # jute.maxbuffer less a request's room: no stored name is longer
_SHOWN = 60                            # characters of a bad name shown in an error


def refused_by_zookeeper(char: str) -> bool:
    """Whether ZooKeeper refuses a path holding this character."""
    code = ord(char)
    return (code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or 0xFFF0 <= code <= 0xFFFF
            or code > 0xFFFF)


def _shown(name: str) -> str:
    return repr(name) if len(name) <= _SHOWN else repr(name[:_SHOWN]) + f"... ({len(name)} characters)"


def _why(char: str) -> str:
    code = ord(char)
    if code <= 0x1F or 0x7F <= code <= 0x9F:
        return "a control character"
    if code > 0xFFFF:
        return "beyond U+FFFF (ZooKeeper refuses the surrogate pair it is sent as)"
    if 0xD800 <= code <= 0xDFFF:
        return "a surrogate"
    if code <= 0xF8FF:
        return "a private-use character"
    return "a noncharacter or specials character (U+FFF0-U+FFFF)"


def check_log_name(name: object, *, new: bool = True) -> str:
    """`name` if it can name a log, else InvalidLogNameError saying which rule it breaks (and which
    character, at which index, counting from 0). `new=False`: the name only finds an existing log, so
    the 249-character limit does not apply (names stored before the rule keep working)."""
    if not isinstance(name, str):
        raise InvalidLogNameError(f"a log name must be a str, got {type(name).__name__}", name=str(name),
                                  reason="not a str")
    if not name:
        raise InvalidLogNameError("a log name must not be empty", name=name, reason="empty")
    if name in (".", ".."):
        raise InvalidLogNameError(f"log name {name!r} is not allowed: '.' and '..' are relative path "
                                  "components in ZooKeeper", name=name, reason="relative")
    too_long = len(name) > MAX_LOG_NAME_LENGTH if new else len(name) * 4 > MAX_STORED_NAME_BYTES and \
        len(name.encode("utf-8", "surrogatepass")) > MAX_STORED_NAME_BYTES
    if too_long:
        raise InvalidLogNameError(
            f"log name {_shown(name)} is {len(name)} characters long; a log name has at most "
            f"{MAX_LOG_NAME_LENGTH} (as a Kafka topic's)", name=name, reason="length")
    for index, char in enumerate(name):
        if char == "/":
            raise InvalidLogNameError(
                f"log name {_shown(name)}: '/' at index {index} is not allowed (it would put the log under "
                "another name's znode); use another separator such as '.', '-' or ':'",
                name=name, reason="slash", char=char, index=index)
        if refused_by_zookeeper(char):
            raise InvalidLogNameError(
                f"log name {_shown(name)}: character U+{ord(char):04X} at index {index} is {_why(char)}, "
                "which ZooKeeper refuses in a znode name; remove or replace it", name=name, reason="character",
                char=char, index=index)
    return name
