"""The gate every request of the bookie's gRPC service passes: parse, check, refuse with a typed answer and a log.

Each one-message method (Read, ReadRange, ReadRanges, ReadLac, WriteLac, ForceLedger, GetBookieInfo,
GetListOfEntries) is served through a handler that reads its request itself (a client sees no
difference: one message either way), so that
- a request that does not parse, or whose values `bookie.core.request_checks` refuses (negative ids, a
  ledger id of 2**64, absurd sizes), is answered with the method's response, status EBADREQ, and logged
  with the client's address, where protobuf's parser would raise into gRPC (UNKNOWN and a traceback);
- a request that never arrives, because it was larger than the message limit (gRPC refuses it with
  RESOURCE_EXHAUSTED before any of our code runs) or the client left first, is logged with the client's
  address, which gRPC does not do.
AddStream's messages are parsed by `parse_add_stream` (`bookie.add_request`, then the same width check);
what does not parse becomes a Malformed item, and the service ends the stream with INVALID_ARGUMENT.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import Message

from bkledger.bookie.add_request import AddBatchView, parse_add_request_wide
from bkledger.bookie.core import request_checks
from bkledger.bookie.core.request_checks import Malformed
from bkledger.proto import bookie_pb2 as pb

log = logging.getLogger("bkledger.server")

# method -> (request class, response class); the response of a refused request carries status EBADREQ
ONE_MESSAGE_METHODS: dict[str, tuple[type[Message], type[Message]]] = {
    "Read": (pb.ReadRequest, pb.ReadResponse),
    "ReadRange": (pb.ReadRangeRequest, pb.ReadRangeBatch),
    "ReadRanges": (pb.ReadRangesRequest, pb.ReadRangeBatch),
    "ReadLac": (pb.ReadLacRequest, pb.ReadLacResponse),
    "WriteLac": (pb.WriteLacRequest, pb.WriteLacResponse),
    "ForceLedger": (pb.ForceLedgerRequest, pb.ForceLedgerResponse),
    "GetBookieInfo": (pb.GetBookieInfoRequest, pb.GetBookieInfoResponse),
    "GetListOfEntries": (pb.GetListOfEntriesRequest, pb.GetListOfEntriesResponse),
}


def parse_add_stream(raw: bytes) -> list[AddBatchView] | Malformed:
    """An AddRequest's batches, or Malformed (the stream is then ended with INVALID_ARGUMENT); a varint wider
    than 64 bits is found by the parse itself, and named as `request_checks.wide_varint` names it."""
    try:
        batches, wide = parse_add_request_wide(raw)
    except ValueError as exc:
        return Malformed(f"the AddRequest does not parse: {exc}")
    if wide is None:
        return batches
    message, number = wide
    field = getattr(pb, message).DESCRIPTOR.fields_by_number.get(number)
    return Malformed(f"the AddRequest has a value wider than 64 bits in {field.name if field else f'field {number}'}")


def guard(handlers: dict[str, grpc.RpcMethodHandler], message_limit: int) -> None:
    """Replace each one-message method's handler in `handlers` by its guarded form (see the module doc)."""
    for method, (request_class, response_class) in ONE_MESSAGE_METHODS.items():
        handler = handlers[method]
        gate = _Gate(method, request_class, response_class, message_limit)
        if handler.response_streaming:
            handlers[method] = grpc.stream_stream_rpc_method_handler(
                gate.streaming(handler.unary_stream), request_deserializer=gate.parse,
                response_serializer=handler.response_serializer)
        else:
            handlers[method] = grpc.stream_unary_rpc_method_handler(
                gate.unary(handler.unary_unary), request_deserializer=gate.parse,
                response_serializer=handler.response_serializer)


Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class _Gate:
    def __init__(self, method: str, request_class: type[Message], response_class: type[Message],
                 message_limit: int) -> None:
        self.method = method
        self.request_class = request_class
        self.response_class = response_class
        self.message_limit = message_limit

    def parse(self, raw: bytes) -> Message | Malformed:
        return request_checks.parse(self.request_class, raw)

    async def _request(self, context: Context) -> Message | None:
        """The request if it may be served; None after answering or logging why not."""
        peer = context.peer()          # now: once gRPC has refused a message, the call no longer knows it
        request = await context.read()
        if request is grpc.aio.EOF:
            log.warning("%s from %s: no request arrived (over the %d-byte message limit, refused by gRPC with "
                        "RESOURCE_EXHAUSTED, or the client left first)", self.method, peer, self.message_limit)
            return None
        why = request.why if isinstance(request, Malformed) else request_checks.check(request)
        if why:
            log.warning("%s from %s refused with EBADREQ: %s", self.method, peer, why)
            return None
        return request

    def _refusal(self) -> Message:
        return self.response_class(status=pb.EBADREQ)

    def unary(self, behaviour: Callable[[Any, Context], Awaitable[Message]]
              ) -> Callable[[AsyncIterator[Any], Context], Awaitable[Message | None]]:
        async def handle(_requests: AsyncIterator[Any], context: Context) -> Message | None:
            request = await self._request(context)
            if request is None:
                return self._refusal()
            return await behaviour(request, context)

        return handle

    def streaming(self, behaviour: Callable[[Any, Context], AsyncIterator[Any]]
                  ) -> Callable[[AsyncIterator[Any], Context], AsyncIterator[Any]]:
        async def handle(_requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            request = await self._request(context)
            if request is None:
                yield self._refusal()
                return
            async for item in behaviour(request, context):
                yield item

        return handle
