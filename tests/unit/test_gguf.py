"""specd.gpu.gguf reads headers written by the `gguf` package's own writer (llama.cpp's gguf-py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from specd.errors import PreflightError
from specd.gpu.gguf import read_gguf_info

TOKENS = [f"tok{i}" if i % 7 else "é" * (i % 300) for i in range(5000)]  # lengths 0..~600 bytes


def write_model(path: Path) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(4096)
    writer.add_token_list(TOKENS)  # a vocabulary long enough to be skipped, not decoded
    writer.add_uint32("llama.embedding_length", 64)
    writer.add_tensor("token_embd.weight", np.zeros((len(TOKENS), 64), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.zeros(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_long_vocabulary_is_stepped_over_and_what_follows_it_is_read(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    write_model(model)
    info = read_gguf_info(model)
    assert (info.architecture, info.block_count, info.context_length) == ("llama", 2, 4096)
    assert info.embedding_length == 64  # written after the vocabulary
    assert info.metadata["tokenizer.ggml.tokens"].length == len(TOKENS)
    assert [tensor.name for tensor in info.tensors] == ["token_embd.weight", "output_norm.weight"]
    assert info.tensor_bytes == len(TOKENS) * 64 * 2 + 64 * 4


@pytest.mark.parametrize("cut", ["inside a token's text", "between a token's length and its text"])
def test_a_header_cut_short_is_a_corrupt_header_naming_the_file(tmp_path: Path, cut: str) -> None:
    model = tmp_path / "m.gguf"
    write_model(model)
    data = model.read_bytes()
    end = data.index(b"tok4000") + (2 if cut.startswith("inside") else 0)
    model.write_bytes(data[:end])
    with pytest.raises(PreflightError, match=r"m\.gguf: corrupt GGUF header: file ends inside the header"):
        read_gguf_info(model)


def test_a_file_that_is_not_gguf_says_so(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(PreflightError, match="not a GGUF file"):
        read_gguf_info(model)
