"""The msgspec mapper: typed encode/decode of stored events, JSON by default, msgpack by setting.

* Encoding writes the event's fields (minus the originator id and version, which are columns) as JSON
  (readable in psql with ``convert_from(state, 'UTF8')``) or msgpack. ``class_version`` is written when > 1.
* Decoding sniffs the format (a JSON object starts with ``{``; a msgpack map never does), so both formats
  stay readable whatever the current setting is, and decodes with a Struct built from the event class's
  annotations: values come back with their declared types (UUID, datetime, nested Structs), validated.
* A payload written by an older ``class_version`` is decoded schemaless, upcast by the class's
  ``upcast_v<N>_v<N+1>(state)`` static methods (which mutate the dict), then converted to the typed shape.
* An unknown topic, or a payload that does not match its class, raises ``CodecError`` naming the topic,
  the stream, the version and the offending field.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import Mapper, MapperDeserialisationError, StoredEvent, Transcoder

from ledger.base import TOPICS
from ledger.sealer import is_sealed
from ledger.sealing import Envelope

FORMATS = ("json", "msgpack")
_SKIP_FIELDS = ("originator_id", "originator_version")
_DROP_IF_NONE = ("idempotency_key", "actor", "idempotency_command")


class CodecError(MapperDeserialisationError):
    """A stored event that cannot be read with the current code."""


_shapes: dict[type, type[msgspec.Struct]] = {}


def payload_shape(cls: type) -> type[msgspec.Struct]:
    """A Struct with the event class's stored fields (and ``class_version``), used for typed decoding."""
    shape = _shapes.get(cls)
    if shape is None:
        hints = typing.get_type_hints(cls)
        fields: list[Any] = []
        for f in dataclasses.fields(cls):
            if f.name in _SKIP_FIELDS:
                continue
            fields.append(struct_field(f.name, hints.get(f.name, Any), f.default, f.default_factory,
                                       dataclasses.MISSING))
        # Defaults must follow required fields in a Struct; kw_only lifts that rule.
        fields.append(("class_version", int, 1))
        fields.append(("sealed", list[Envelope] | None, None))  # a sealed payload's envelopes (ledger.sealer)
        shape = msgspec.defstruct(f"{cls.__name__}Payload", fields, kw_only=True)
        _shapes[cls] = shape
    return shape


def struct_field(name: str, tp: Any, default: Any, default_factory: Any, missing: Any) -> tuple[Any, ...]:
    """A field of ``msgspec.defstruct``: with its default or default factory unless either is ``missing``."""
    if default is not missing:
        return (name, tp, default)
    if default_factory is not missing:
        return (name, tp, msgspec.field(default_factory=default_factory))
    return (name, tp)


class MsgspecMapper(Mapper):
    """Replaces the library's Mapper (plugged in by ``ChatLedgerApp.construct_mapper``)."""

    def __init__(self, transcoder: Transcoder | None = None, compressor: Any = None,
                 cipher: Any = None, fmt: str = "json") -> None:
        super().__init__(transcoder=transcoder, compressor=compressor, cipher=cipher)  # type: ignore[arg-type]
        if fmt not in FORMATS:
            raise ValueError(f"unknown payload format {fmt!r} (choose json or msgpack)")
        self.format = fmt
        self._encode = msgspec.json.Encoder().encode if fmt == "json" else msgspec.msgpack.Encoder().encode
        #: for classes that fix their own format (snapshots): msgpack with UUIDs as 16 bytes (typed fields
        #: only hold them; a fifth smaller, and faster to decode, than their 36-character text)
        self._encoders = {"json": msgspec.json.Encoder().encode,
                          "msgpack": msgspec.msgpack.Encoder(uuid_format="bytes").encode}
        #: seals personal values when the ledger was opened with a master key (``ledger.sealer``); None: not
        self.sealer: Any = None
        self._json_decoders: dict[type, msgspec.json.Decoder] = {}
        self._msgpack_decoders: dict[type, msgspec.msgpack.Decoder] = {}

    # -- write ---------------------------------------------------------------------------------------
    def encode_payload(self, event: Any) -> bytes:
        state = dict(vars(event))
        for name in _SKIP_FIELDS:
            del state[name]
        for name in _DROP_IF_NONE:
            if state.get(name, 0) is None:
                del state[name]
        class_version = getattr(type(event), "class_version", 1)
        if class_version > 1:
            state["class_version"] = class_version
        fmt = getattr(type(event), "PAYLOAD_FORMAT", None)  # a class may fix its own (snapshots: msgpack)
        if fmt is not None:
            return self._encoders[fmt](state)
        if self.sealer is not None:  # personal values sealed under their subjects' keys (ledger.sealer)
            # (the box of an event sealed whole holds its payload as msgpack too: smaller, quicker to decode)
            sealed = self.sealer.seal(event, state, type(event).TOPIC, lambda: self._encoders["msgpack"](state))
            if sealed is not None:  # msgpack whatever the format: its boxes are binary (no base64), nobody reads it
                return self._encoders["msgpack"](sealed)
        return self._encode(state)

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        data = self.encode_payload(domain_event)
        if self.compressor:
            data = self.compressor.compress(data)
        if self.cipher:
            data = self.cipher.encrypt(data)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=type(domain_event).TOPIC,
            state=data,
        )

    # -- read ----------------------------------------------------------------------------------------
    def decode_payload(self, topic: str, data: bytes, where: str = "") -> tuple[type, dict[str, Any]]:
        cls = TOPICS.get(topic)
        if cls is None:
            raise CodecError(f"unknown event topic {topic!r}{where}")
        current = getattr(cls, "class_version", 1)
        is_json = data[:1] == b"{"
        try:
            decoder = self._decoder(cls, is_json)
            try:
                payload = decoder.decode(data)
            except msgspec.ValidationError:
                payload = None
            if payload is not None and payload.class_version == current:
                state = msgspec.structs.asdict(payload)
            else:
                raw = (msgspec.json.decode(data) if is_json else msgspec.msgpack.decode(data))
                if not isinstance(raw, dict):
                    raise CodecError("payload is not an object")
                version = raw.pop("class_version", 1)
                if version > current:
                    raise CodecError(f"payload class_version {version} is newer than the code's {current}")
                while version < current:
                    upcast = getattr(cls, f"upcast_v{version}_v{version + 1}", None)
                    if upcast is None:
                        raise CodecError(f"no upcaster upcast_v{version}_v{version + 1}")
                    upcast(raw)
                    version += 1
                # Decode the upcast state exactly as a current payload would be (same strict rules).
                again = msgspec.json.encode(raw) if is_json else msgspec.msgpack.encode(raw)
                state = msgspec.structs.asdict(decoder.decode(again))
        except CodecError as e:
            raise CodecError(f"cannot decode {topic} (class_version {current}){where}: {e}") from e
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CodecError(f"cannot decode {topic} (class_version {current}){where}: {e}") from e
        del state["class_version"]
        return cls, state

    def _decoder(self, cls: type, is_json: bool) -> Any:
        cache = self._json_decoders if is_json else self._msgpack_decoders
        decoder = cache.get(cls)
        if decoder is None:
            shape = payload_shape(cls)
            decoder = msgspec.json.Decoder(shape) if is_json else msgspec.msgpack.Decoder(shape)
            cache[cls] = decoder
        return decoder

    def _unsealed(self, state: dict[str, Any], envelopes: list[Any], cls: type, stored: StoredEvent,
                  stream: UUID) -> dict[str, Any]:
        """The decoded fields with their sealed values back (tombstones where a key was destroyed)."""
        if self.sealer is None:
            raise CodecError("its personal fields are sealed and this process has no master key "
                             "(CHAT_LEDGER_MASTER_KEY: docs/privacy.md)")
        try:
            return self.sealer.unseal(state, envelopes, cls, stream, stored.originator_version, stored.topic)
        except ValueError as e:  # SealError: a changed record
            raise CodecError(str(e)) from e

    def to_clear_event(self, stored_event: StoredEvent) -> Any:
        """The event as ``to_domain_event`` gives it, without opening any sealed value: the personal places hold
        the empty placeholders they are stored with (``""``, ``{}``, null), whether their keys exist or not. For
        readers that read no personal field (a projection with ``personal`` False): no key is used or needed,
        and no personal value is decrypted into their memory."""
        return self.to_domain_event(stored_event, open_sealed=False)

    def to_domain_event(self, stored_event: StoredEvent, open_sealed: bool = True) -> Any:
        """The stored event as an event; ``open_sealed`` False: ``to_clear_event``."""
        data = stored_event.state
        if self.cipher:
            data = self.cipher.decrypt(data)
        if self.compressor:
            data = self.compressor.decompress(data)
        oid = stored_event.originator_id
        stream = oid if isinstance(oid, UUID) else UUID(str(oid))
        try:
            if open_sealed and self.sealer is not None and is_sealed(data):  # sealed whole: decrypt, decode as usual
                try:
                    opened = self.sealer.open_payload(data, stream, stored_event.originator_version,
                                                      stored_event.topic)
                except ValueError as e:  # SealError: a changed record
                    raise CodecError(str(e)) from e
                if opened is not None:
                    data = opened
            cls, state = self.decode_payload(stored_event.topic, data)
            envelopes = state.pop("sealed")
            if envelopes and open_sealed:  # several subjects' values, or a destroyed key: values (or tombstones) back
                state = self._unsealed(state, envelopes, cls, stored_event, stream)
        except CodecError as e:  # name the stream and version (formatted only when something failed)
            raise CodecError(f"{e} (in stream {oid} at version {stored_event.originator_version})") from e
        state["originator_id"] = stream
        state["originator_version"] = stored_event.originator_version
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", state)
        return event
