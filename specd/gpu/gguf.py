"""Facts specd needs from a GGUF file's header: architecture, MTP layers, shapes, tensor bytes.

The `gguf` package memory-maps the file, so reading metadata of a 20 GB model costs milliseconds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specd.errors import PreflightError

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class Tensor:
    """One tensor of the header: its name, shape, ggml type and size in bytes."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    nbytes: int


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    file_size: int
    architecture: str
    name: str | None
    block_count: int | None
    context_length: int | None
    embedding_length: int | None
    head_count: int | None
    head_count_kv: int | None
    key_length: int | None
    value_length: int | None
    sliding_window: int | None
    nextn_predict_layers: int
    file_type: int | None
    tensor_count: int
    tensor_bytes: int
    metadata: dict[str, Any]
    tensors: tuple[Tensor, ...] = ()

    @property
    def has_mtp(self) -> bool:
        return self.nextn_predict_layers > 0


def _scalar(value: Any) -> Any:
    if isinstance(value, list) and len(value) > 0:
        return value[0]
    return value


_SCALAR_FORMATS: dict[int, str] = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
_MAX_INLINE_ARRAY = 64


class HeaderReader:
    """A streaming GGUF header parser: long arrays (the tokenizer's) are skipped, not decoded."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle

    def read(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.handle.read(size)
        if len(data) != size:
            raise ValueError("file ends inside the header")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        length = self.read("<Q")
        if length > 1 << 24:
            raise ValueError(f"string length {length} is implausible")
        return self.handle.read(length).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Step over `count` strings (a tokenizer's vocabulary) by their lengths, decoding none:
        the lengths are read out of 1 MiB blocks, so a 250k-token vocabulary costs ~0.1 s."""
        start = self.handle.tell()
        offset = block_start = 0
        block = b""
        for _ in range(count):
            at = offset - block_start
            if at + 8 > len(block):
                self.handle.seek(start + offset)
                block, block_start, at = self.handle.read(1 << 20), offset, 0
                if len(block) < 8:
                    raise ValueError("file ends inside the header")
            length = _U64.unpack_from(block, at)[0]
            if length > 1 << 24:
                raise ValueError(f"string length {length} is implausible")
            offset += 8 + length
        self.handle.seek(start + offset)

    def value(self, value_type: int) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.read(_SCALAR_FORMATS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type = self.read("<I")
            count = self.read("<Q")
            if count <= _MAX_INLINE_ARRAY:
                return [self.value(item_type) for _ in range(count)]
            if item_type in _SCALAR_FORMATS:
                self.handle.seek(count * struct.calcsize(_SCALAR_FORMATS[item_type]), 1)
            elif item_type == _STRING:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.value(item_type)
            return _SkippedArray(count)
        raise ValueError(f"unknown metadata value type {value_type}")


@dataclass(frozen=True)
class _SkippedArray:
    length: int


def tensor_nbytes(ggml_type: int, dims: list[int]) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    elements = 1
    for dim in dims:
        elements *= dim
    return elements // block_size * type_size


def read_gguf_info(path: Path) -> GgufInfo:
    """Read the header; raise PreflightError naming the file if it is missing or not GGUF."""
    if not path.is_file():
        raise PreflightError(f"{path}: no such model file")
    try:
        with path.open("rb") as handle:
            if handle.read(4) != GGUF_MAGIC:
                raise PreflightError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
            metadata, tensors = _read_header(HeaderReader(handle))
    except OSError as exc:
        raise PreflightError(f"{path}: cannot read: {exc.strerror}") from exc
    except (ValueError, KeyError, struct.error) as exc:
        raise PreflightError(f"{path}: corrupt GGUF header: {exc}") from exc

    arch = str(metadata.get("general.architecture", "unknown"))

    def arch_int(suffix: str) -> int | None:
        value = _scalar(metadata.get(f"{arch}.{suffix}"))
        return int(value) if isinstance(value, (int, float)) else None

    name = metadata.get("general.name")
    file_type = metadata.get("general.file_type")
    return GgufInfo(
        path=path,
        file_size=path.stat().st_size,
        architecture=arch,
        name=name if isinstance(name, str) else None,
        block_count=arch_int("block_count"),
        context_length=arch_int("context_length"),
        embedding_length=arch_int("embedding_length"),
        head_count=arch_int("attention.head_count"),
        head_count_kv=arch_int("attention.head_count_kv"),
        key_length=arch_int("attention.key_length"),
        value_length=arch_int("attention.value_length"),
        sliding_window=arch_int("attention.sliding_window"),
        nextn_predict_layers=arch_int("nextn_predict_layers") or 0,
        file_type=file_type if isinstance(file_type, int) else None,
        tensor_count=len(tensors),
        tensor_bytes=sum(t.nbytes for t in tensors),
        metadata=metadata,
        tensors=tensors,
    )


def _read_header(reader: HeaderReader) -> tuple[dict[str, Any], tuple[Tensor, ...]]:
    """The one walk over a GGUF header: metadata, then every tensor's name, shape, type and size."""
    version = reader.read("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    tensor_count = reader.read("<Q")
    kv_count = reader.read("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(reader.read("<I"))
    tensors = []
    for _ in range(tensor_count):
        name = reader.string()
        dims = tuple(reader.read("<Q") for _ in range(reader.read("<I")))
        ggml_type = reader.read("<I")
        reader.read("<Q")
        tensors.append(Tensor(name, dims, ggml_type, tensor_nbytes(ggml_type, list(dims))))
    return metadata, tuple(tensors)
