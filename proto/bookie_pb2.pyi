from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EOK: _ClassVar[StatusCode]
    ENOLEDGER: _ClassVar[StatusCode]
    ENOENTRY: _ClassVar[StatusCode]
    EBADREQ: _ClassVar[StatusCode]
    EIO: _ClassVar[StatusCode]
    EUA: _ClassVar[StatusCode]
    EBADVERSION: _ClassVar[StatusCode]
    EFENCED: _ClassVar[StatusCode]
    EREADONLY: _ClassVar[StatusCode]
    ETOOMANYREQUESTS: _ClassVar[StatusCode]
    EUNKNOWNLEDGERSTATE: _ClassVar[StatusCode]

class WriteFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WRITE_FLAG_NONE: _ClassVar[WriteFlag]
    DEFERRED_SYNC: _ClassVar[WriteFlag]
EOK: StatusCode
ENOLEDGER: StatusCode
ENOENTRY: StatusCode
EBADREQ: StatusCode
EIO: StatusCode
EUA: StatusCode
EBADVERSION: StatusCode
EFENCED: StatusCode
EREADONLY: StatusCode
ETOOMANYREQUESTS: StatusCode
EUNKNOWNLEDGERSTATE: StatusCode
WRITE_FLAG_NONE: WriteFlag
DEFERRED_SYNC: WriteFlag

class AddBatch(_message.Message):
    __slots__ = ("ledger_id", "master_key", "recovery_add", "write_flags", "high_priority", "entry_ids", "sizes", "data")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ADD_FIELD_NUMBER: _ClassVar[int]
    WRITE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    HIGH_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    recovery_add: bool
    write_flags: int
    high_priority: bool
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., recovery_add: _Optional[bool] = ..., write_flags: _Optional[int] = ..., high_priority: _Optional[bool] = ..., entry_ids: _Optional[_Iterable[int]] = ..., sizes: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class AddRequest(_message.Message):
    __slots__ = ("txn_id", "batches")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    batches: _containers.RepeatedCompositeFieldContainer[AddBatch]
    def __init__(self, txn_id: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[AddBatch, _Mapping]]] = ...) -> None: ...

class AddAck(_message.Message):
    __slots__ = ("ledger_id", "status", "entry_ids")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    status: StatusCode
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ledger_id: _Optional[int] = ..., status: _Optional[_Union[StatusCode, str]] = ..., entry_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("txn_id", "acks")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    acks: _containers.RepeatedCompositeFieldContainer[AddAck]
    def __init__(self, txn_id: _Optional[int] = ..., acks: _Optional[_Iterable[_Union[AddAck, _Mapping]]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "master_key", "fence", "has_previous_lac", "previous_lac", "timeout_ms", "piggyback_entry", "high_priority")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    HAS_PREVIOUS_LAC_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_LAC_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PIGGYBACK_ENTRY_FIELD_NUMBER: _ClassVar[int]
    HIGH_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    master_key: bytes
    fence: bool
    has_previous_lac: bool
    previous_lac: int
    timeout_ms: int
    piggyback_entry: bool
    high_priority: bool
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., fence: _Optional[bool] = ..., has_previous_lac: _Optional[bool] = ..., previous_lac: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., piggyback_entry: _Optional[bool] = ..., high_priority: _Optional[bool] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_id", "body", "max_lac")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    MAX_LAC_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_id: int
    body: bytes
    max_lac: int
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., body: _Optional[bytes] = ..., max_lac: _Optional[int] = ...) -> None: ...

class ReadRangeRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "last_entry_id", "max_batch_bytes", "max_batch_entries", "fence", "master_key", "residue_modulus", "residue_mask")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    RESIDUE_MODULUS_FIELD_NUMBER: _ClassVar[int]
    RESIDUE_MASK_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    max_batch_bytes: int
    max_batch_entries: int
    fence: bool
    master_key: bytes
    residue_modulus: int
    residue_mask: int
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., max_batch_entries: _Optional[int] = ..., fence: _Optional[bool] = ..., master_key: _Optional[bytes] = ..., residue_modulus: _Optional[int] = ..., residue_mask: _Optional[int] = ...) -> None: ...

class ReadRangeBatch(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_ids", "sizes", "data", "ledger_ids")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LEDGER_IDS_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    ledger_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_ids: _Optional[_Iterable[int]] = ..., sizes: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., ledger_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ReadRangesRequest(_message.Message):
    __slots__ = ("ranges", "max_batch_bytes")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[ReadRangeRequest]
    max_batch_bytes: int
    def __init__(self, ranges: _Optional[_Iterable[_Union[ReadRangeRequest, _Mapping]]] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "lac_body", "last_entry_body")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_BODY_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_BODY_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    lac_body: bytes
    last_entry_body: bytes
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., lac_body: _Optional[bytes] = ..., last_entry_body: _Optional[bytes] = ...) -> None: ...

class WriteLacRequest(_message.Message):
    __slots__ = ("ledger_id", "lac", "master_key", "body")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    lac: int
    master_key: bytes
    body: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., lac: _Optional[int] = ..., master_key: _Optional[bytes] = ..., body: _Optional[bytes] = ...) -> None: ...

class WriteLacResponse(_message.Message):
    __slots__ = ("status", "ledger_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ...) -> None: ...

class ForceLedgerRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ForceLedgerResponse(_message.Message):
    __slots__ = ("status", "ledger_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ...) -> None: ...

class GetBookieInfoRequest(_message.Message):
    __slots__ = ("requested",)
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    requested: int
    def __init__(self, requested: _Optional[int] = ...) -> None: ...

class GetBookieInfoResponse(_message.Message):
    __slots__ = ("status", "total_disk_capacity", "free_disk_space", "bookie_id", "read_only")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DISK_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    FREE_DISK_SPACE_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    total_disk_capacity: int
    free_disk_space: int
    bookie_id: str
    read_only: bool
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., total_disk_capacity: _Optional[int] = ..., free_disk_space: _Optional[int] = ..., bookie_id: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

class GetListOfEntriesRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class GetListOfEntriesResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_ids")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_ids: _Optional[_Iterable[int]] = ...) -> None: ...
