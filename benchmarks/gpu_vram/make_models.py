"""Random-weight GGUF models with real architecture shapes, for measuring VRAM (not quality).

    make_models.py vocab SRC.gguf DST.json.gz        # tokenizer of a GGUF -> compact JSON (run here)
    make_models.py model PRESET TYPE VOCAB.json.gz OUT.gguf [--header-only]

Presets: llama-1b (Llama 3.2 1B shapes, tied embeddings), llama-8b (Llama 3.1 8B), gemma3-4b
(Gemma 3 4B, sliding window 1024), tiny-llama, tiny-gemma3 (for local tests). TYPE: f16 or q8_0.
Weights are a repeated random pattern (valid Q8_0 blocks with small scales): llama-server loads and
runs them; the text they produce is noise. --header-only writes the header and tensor table
without data, enough for specd.gpu.gguf and specd.gpu.vram to compute estimates.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES


@dataclass(frozen=True)
class Shape:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    tied: bool
    ctx_train: int
    sliding_window: int = 0


PRESETS: dict[str, Shape] = {
    "llama-1b": Shape("llama", 16, 2048, 32, 8, 8192, 64, True, 131072),
    "llama-8b": Shape("llama", 32, 4096, 32, 8, 14336, 128, False, 131072),
    "gemma3-4b": Shape("gemma3", 34, 2560, 8, 4, 10240, 256, True, 131072, 1024),
    "tiny-llama": Shape("llama", 2, 128, 4, 2, 256, 32, False, 4096),
    "tiny-gemma3": Shape("gemma3", 7, 64, 4, 2, 128, 32, True, 4096, 128),
}
FILE_TYPES = {"f16": 1, "q8_0": 7}
PATTERN_BYTES = 1 << 24


def save_vocab(source: Path, target: Path) -> None:
    """Copy every tokenizer.* key of a GGUF into gzipped JSON (GGUFReader is slow; do it once, here)."""
    reader = GGUFReader(source)
    vocab: dict[str, Any] = {}
    for name, item in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = item.contents()
        kind = item.types[-1] if item.types[0] == GGUFValueType.ARRAY else item.types[0]
        vocab[name] = {"type": int(item.types[0]), "sub": int(kind), "value": value}
    with gzip.open(target, "wt", encoding="utf-8") as handle:
        json.dump(vocab, handle)
    tokens = vocab.get("tokenizer.ggml.tokens", {}).get("value", [])
    print(f"{target}: {len(vocab)} tokenizer keys, {len(tokens)} tokens")


def load_vocab(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def tensors(shape: Shape, n_vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, ggml ne, is_matrix) for every tensor llama.cpp's loader wants for this shape."""
    q_dim, kv_dim = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    found: list[tuple[str, tuple[int, ...], bool]] = [("token_embd.weight", (shape.n_embd, n_vocab), True),
                                                      ("output_norm.weight", (shape.n_embd,), False)]
    if not shape.tied:
        found.append(("output.weight", (shape.n_embd, n_vocab), True))
    for index in range(shape.n_layer):
        prefix = f"blk.{index}."
        found += [
            (prefix + "attn_norm.weight", (shape.n_embd,), False),
            (prefix + "attn_q.weight", (shape.n_embd, q_dim), True),
            (prefix + "attn_k.weight", (shape.n_embd, kv_dim), True),
            (prefix + "attn_v.weight", (shape.n_embd, kv_dim), True),
            (prefix + "attn_output.weight", (q_dim, shape.n_embd), True),
            (prefix + "ffn_norm.weight", (shape.n_embd,), False),
            (prefix + "ffn_gate.weight", (shape.n_embd, shape.n_ff), True),
            (prefix + "ffn_up.weight", (shape.n_embd, shape.n_ff), True),
            (prefix + "ffn_down.weight", (shape.n_ff, shape.n_embd), True),
        ]
        if shape.arch == "gemma3":
            found += [
                (prefix + "attn_q_norm.weight", (shape.head_dim,), False),
                (prefix + "attn_k_norm.weight", (shape.head_dim,), False),
                (prefix + "post_attention_norm.weight", (shape.n_embd,), False),
                (prefix + "post_ffw_norm.weight", (shape.n_embd,), False),
            ]
    return found


def _patterns(seed: int) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    f16 = (rng.standard_normal(PATTERN_BYTES // 2) * 0.02).astype(np.float16).view(np.uint8)
    blocks = PATTERN_BYTES // 34
    q8 = np.empty((blocks, 34), dtype=np.uint8)
    q8[:, :2] = np.full(blocks, 0.0005, dtype=np.float16).view(np.uint8).reshape(blocks, 2)
    q8[:, 2:] = rng.integers(-127, 128, size=(blocks, 32), dtype=np.int8).view(np.uint8)
    f32 = np.ones(PATTERN_BYTES // 4, dtype=np.float32).view(np.uint8)
    return {"f16": f16, "q8_0": q8.reshape(-1), "f32": f32}


def _fill(pattern: np.ndarray[Any, Any], nbytes: int, offset: int) -> np.ndarray[Any, Any]:
    start = offset % len(pattern)
    return np.resize(np.roll(pattern, -start) if start else pattern, nbytes)


def write_model(preset: str, weight_type: str, vocab_path: Path, out: Path, header_only: bool) -> None:
    shape = PRESETS[preset]
    vocab = load_vocab(vocab_path)
    n_vocab = len(vocab["tokenizer.ggml.tokens"]["value"])
    writer = GGUFWriter(out, shape.arch)
    arch = shape.arch
    writer.add_name(f"specd-vram-{preset}-{weight_type}")
    writer.add_uint32(f"{arch}.context_length", shape.ctx_train)
    writer.add_uint32(f"{arch}.embedding_length", shape.n_embd)
    writer.add_uint32(f"{arch}.block_count", shape.n_layer)
    writer.add_uint32(f"{arch}.feed_forward_length", shape.n_ff)
    writer.add_uint32(f"{arch}.attention.head_count", shape.n_head)
    writer.add_uint32(f"{arch}.attention.head_count_kv", shape.n_head_kv)
    writer.add_uint32(f"{arch}.attention.key_length", shape.head_dim)
    writer.add_uint32(f"{arch}.attention.value_length", shape.head_dim)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_float32(f"{arch}.rope.freq_base", 500000.0 if arch == "llama" else 1000000.0)
    if arch == "llama":
        writer.add_uint32(f"{arch}.rope.dimension_count", shape.head_dim)
        writer.add_uint32(f"{arch}.vocab_size", n_vocab)
    if shape.sliding_window:
        writer.add_uint32(f"{arch}.attention.sliding_window", shape.sliding_window)
    writer.add_uint32("general.file_type", FILE_TYPES[weight_type])
    for key, item in vocab.items():
        if item["type"] == GGUFValueType.ARRAY:
            writer.add_key_value(key, item["value"], GGUFValueType.ARRAY, GGUFValueType(item["sub"]))
        else:
            writer.add_key_value(key, item["value"], GGUFValueType(item["type"]))

    matrix_type = GGMLQuantizationType.F16 if weight_type == "f16" else GGMLQuantizationType.Q8_0
    layout = []
    for name, ne, is_matrix in tensors(shape, n_vocab):
        ggml_type = matrix_type if is_matrix else GGMLQuantizationType.F32
        block, size = GGML_QUANT_SIZES[ggml_type]
        elements = int(np.prod(ne))
        nbytes = elements // block * size
        numpy_shape = tuple(reversed(ne))
        writer.add_tensor_info(name, numpy_shape, np.dtype(np.float32), nbytes, raw_dtype=ggml_type)
        layout.append((nbytes, "f32" if not is_matrix else weight_type))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total = sum(nbytes for nbytes, _ in layout)
    if header_only:
        writer.close()
        print(f"{out}: header only, {len(layout)} tensors, {total / 2**30:.2f} GiB of tensor data omitted")
        return
    patterns = _patterns(seed=len(out.name))
    offset = 0
    for nbytes, kind in layout:
        writer.write_tensor_data(_fill(patterns[kind], nbytes, offset))
        offset += nbytes
    writer.close()
    print(f"{out}: {len(layout)} tensors, {total / 2**30:.2f} GiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    vocab = sub.add_parser("vocab")
    vocab.add_argument("source", type=Path)
    vocab.add_argument("target", type=Path)
    model = sub.add_parser("model")
    model.add_argument("preset", choices=sorted(PRESETS))
    model.add_argument("type", choices=sorted(FILE_TYPES))
    model.add_argument("vocab", type=Path)
    model.add_argument("out", type=Path)
    model.add_argument("--header-only", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "vocab":
        save_vocab(args.source, args.target)
    else:
        write_model(args.preset, args.type, args.vocab, args.out, args.header_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
