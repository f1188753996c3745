"""Small real GGUF files for tests, written with the gguf package."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_gguf(path: Path, *, arch: str = "llama", nextn_layers: int | None = None, blocks: int = 2) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(blocks)
    writer.add_context_length(256)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    if nextn_layers is not None:
        writer.add_uint32(f"{arch}.nextn_predict_layers", nextn_layers)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
