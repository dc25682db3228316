from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LedgerMetadataFormat(_message.Message):
    __slots__ = ("write_quorum_size", "ensemble_size", "length", "last_entry_id", "state", "segment", "digest_type", "password", "ack_quorum_size", "ctime", "custom_metadata", "compression")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[LedgerMetadataFormat.State]
        OPEN: _ClassVar[LedgerMetadataFormat.State]
        IN_RECOVERY: _ClassVar[LedgerMetadataFormat.State]
        CLOSED: _ClassVar[LedgerMetadataFormat.State]
    STATE_UNSPECIFIED: LedgerMetadataFormat.State
    OPEN: LedgerMetadataFormat.State
    IN_RECOVERY: LedgerMetadataFormat.State
    CLOSED: LedgerMetadataFormat.State
    class DigestType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DIGEST_UNSPECIFIED: _ClassVar[LedgerMetadataFormat.DigestType]
        CRC32: _ClassVar[LedgerMetadataFormat.DigestType]
        HMAC: _ClassVar[LedgerMetadataFormat.DigestType]
        CRC32C: _ClassVar[LedgerMetadataFormat.DigestType]
        DUMMY: _ClassVar[LedgerMetadataFormat.DigestType]
    DIGEST_UNSPECIFIED: LedgerMetadataFormat.DigestType
    CRC32: LedgerMetadataFormat.DigestType
    HMAC: LedgerMetadataFormat.DigestType
    CRC32C: LedgerMetadataFormat.DigestType
    DUMMY: LedgerMetadataFormat.DigestType
    class Segment(_message.Message):
        __slots__ = ("ensemble_member", "first_entry_id")
        ENSEMBLE_MEMBER_FIELD_NUMBER: _ClassVar[int]
        FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
        ensemble_member: _containers.RepeatedScalarFieldContainer[str]
        first_entry_id: int
        def __init__(self, ensemble_member: _Optional[_Iterable[str]] = ..., first_entry_id: _Optional[int] = ...) -> None: ...
    class CustomMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    WRITE_QUORUM_SIZE_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_TYPE_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    ACK_QUORUM_SIZE_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    write_quorum_size: int
    ensemble_size: int
    length: int
    last_entry_id: int
    state: LedgerMetadataFormat.State
    segment: _containers.RepeatedCompositeFieldContainer[LedgerMetadataFormat.Segment]
    digest_type: LedgerMetadataFormat.DigestType
    password: bytes
    ack_quorum_size: int
    ctime: int
    custom_metadata: _containers.RepeatedCompositeFieldContainer[LedgerMetadataFormat.CustomMetadataEntry]
    compression: str
    def __init__(self, write_quorum_size: _Optional[int] = ..., ensemble_size: _Optional[int] = ..., length: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., state: _Optional[_Union[LedgerMetadataFormat.State, str]] = ..., segment: _Optional[_Iterable[_Union[LedgerMetadataFormat.Segment, _Mapping]]] = ..., digest_type: _Optional[_Union[LedgerMetadataFormat.DigestType, str]] = ..., password: _Optional[bytes] = ..., ack_quorum_size: _Optional[int] = ..., ctime: _Optional[int] = ..., custom_metadata: _Optional[_Iterable[_Union[LedgerMetadataFormat.CustomMetadataEntry, _Mapping]]] = ..., compression: _Optional[str] = ...) -> None: ...

class CookieFormat(_message.Message):
    __slots__ = ("bookie_host", "journal_dir", "ledger_dirs", "instance_id")
    BOOKIE_HOST_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_DIR_FIELD_NUMBER: _ClassVar[int]
    LEDGER_DIRS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    bookie_host: str
    journal_dir: str
    ledger_dirs: str
    instance_id: str
    def __init__(self, bookie_host: _Optional[str] = ..., journal_dir: _Optional[str] = ..., ledger_dirs: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class BookieServiceInfoFormat(_message.Message):
    __slots__ = ("bookie_id", "host", "port", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    host: str
    port: int
    properties: _containers.ScalarMap[str, str]
    def __init__(self, bookie_id: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UnderreplicatedLedgerFormat(_message.Message):
    __slots__ = ("replica", "ctime")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    replica: _containers.RepeatedScalarFieldContainer[str]
    ctime: int
    def __init__(self, replica: _Optional[_Iterable[str]] = ..., ctime: _Optional[int] = ...) -> None: ...

class LockDataFormat(_message.Message):
    __slots__ = ("bookie_id",)
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    def __init__(self, bookie_id: _Optional[str] = ...) -> None: ...

class AuditorVoteFormat(_message.Message):
    __slots__ = ("bookie_id",)
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    def __init__(self, bookie_id: _Optional[str] = ...) -> None: ...
