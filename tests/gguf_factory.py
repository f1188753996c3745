"""Small real GGUF files for tests, written with the gguf package."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

from specd.gpu.gguf import GgufInfo, read_gguf_info

F16, Q8_0, F32 = GGMLQuantizationType.F16, GGMLQuantizationType.Q8_0, GGMLQuantizationType.F32


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


def write_header(path: Path, arch: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_ff: int,
                 head_dim: int, n_vocab: int, tied: bool, weight_type: GGMLQuantizationType,
                 sliding_window: int = 0, extra: dict[str, int] | None = None) -> GgufInfo:
    writer = GGUFWriter(path, arch)
    for key, value in {"context_length": 131072, "embedding_length": n_embd, "block_count": n_layer,
                       "feed_forward_length": n_ff, "attention.head_count": n_head,
                       "attention.head_count_kv": n_head_kv, "attention.key_length": head_dim,
                       "attention.value_length": head_dim, **(extra or {})}.items():
        writer.add_uint32(f"{arch}.{key}", value)
    if sliding_window:
        writer.add_uint32(f"{arch}.attention.sliding_window", sliding_window)
    q, kv = n_head * head_dim, n_head_kv * head_dim
    shapes = [("token_embd.weight", (n_embd, n_vocab)), ("output_norm.weight", (n_embd,))]
    if not tied:
        shapes.append(("output.weight", (n_embd, n_vocab)))
    for i in range(n_layer):
        shapes += [(f"blk.{i}.attn_norm.weight", (n_embd,)), (f"blk.{i}.attn_q.weight", (n_embd, q)),
                   (f"blk.{i}.attn_k.weight", (n_embd, kv)), (f"blk.{i}.attn_v.weight", (n_embd, kv)),
                   (f"blk.{i}.attn_output.weight", (q, n_embd)), (f"blk.{i}.ffn_norm.weight", (n_embd,)),
                   (f"blk.{i}.ffn_gate.weight", (n_embd, n_ff)), (f"blk.{i}.ffn_up.weight", (n_embd, n_ff)),
                   (f"blk.{i}.ffn_down.weight", (n_ff, n_embd))]
        if arch == "gemma3":
            shapes += [(f"blk.{i}.attn_q_norm.weight", (head_dim,)), (f"blk.{i}.attn_k_norm.weight", (head_dim,)),
                       (f"blk.{i}.post_attention_norm.weight", (n_embd,)),
                       (f"blk.{i}.post_ffw_norm.weight", (n_embd,))]
    for name, ne in shapes:
        ggml_type = weight_type if len(ne) == 2 else F32
        block, size = GGML_QUANT_SIZES[ggml_type]
        writer.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32),
                               int(np.prod(ne)) // block * size, raw_dtype=ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return read_gguf_info(path)


BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_vram"
# vocabulary rows of the benchmark models, by architecture prefix (as on the device: make_models.py
# with llama.cpp's llama-bpe tokenizer, Qwen3.5's padded to 248,320, and Gemma 3's 262,144)
BENCH_VOCABS = {"qwen3": 248320, "dflash": 248320, "llama": 128256, "gemma3": 262144}


def bench_module(name: str) -> Any:
    """A module of benchmarks/gpu_vram (measure, cases, make_models, summarize), imported once."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def bench_headers(folder: Path, records: Iterable[dict[str, Any]]) -> Path:
    """Header-only twins of every benchmark model the results records name, vocabularies of the real sizes."""
    make_models = bench_module("make_models")
    names = {record["case"][key] for record in records for key in ("model", "draft") if record["case"].get(key)}
    for name in sorted(names):
        preset, weight_type = name.rsplit("-", 1)
        arch = make_models.PRESETS[preset].arch
        size = next(count for prefix, count in BENCH_VOCABS.items() if arch.startswith(prefix))
        vocab = folder / f"vocab-{size}.json.gz"
        if not vocab.exists():
            with gzip.open(vocab, "wt") as handle:
                json.dump({"tokenizer.ggml.model": {"type": 8, "sub": 8, "value": "gpt2"},
                           "tokenizer.ggml.tokens": {"type": 9, "sub": 8,
                                                     "value": [f"t{i}" for i in range(size)]}}, handle)
        make_models.write_model(preset, weight_type, vocab, folder / f"{name}.gguf", header_only=True)
    return folder
