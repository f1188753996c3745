"""Random-weight GGUF models with real architecture shapes, for measuring VRAM (not quality).

    make_models.py vocab SRC.gguf DST.json.gz        # tokenizer of a GGUF -> compact JSON (run here)
    make_models.py model PRESET TYPE VOCAB.json.gz OUT.gguf [--header-only]

Presets: llama-1b (Llama 3.2 1B shapes, tied embeddings), llama-8b (Llama 3.1 8B), gemma3-4b
(Gemma 3 4B, sliding window 1024); hybrid9 (Qwen3.5-9B layer shapes, 16 of 32 layers), next80
(Qwen3-Next-80B-A3B: qwen3next, 512 experts, top-10, 4 of 48 layers), dflash9, moe30 (Qwen3-30B-A3B:
qwen3moe, 128 experts, top-8, 8 of 48 layers); the Qwen3.6 family as llama.cpp's qwen35/qwen35moe/dflash
architectures: hybrid27 (Qwen3.6-27B layer shapes: gated DeltaNet x3 + gated attention x1, 16 of
its 64 layers, its MTP layer), moe35 (Qwen3.6-35B-A3B layer shapes: 256 experts, top-8, shared
expert, 12 of its 40 layers, its MTP layer), hybrid08 (Qwen3.5-0.8B, all 24 layers: a draft),
dflash27 (a DFlash drafter for hybrid27: 5 layers reading 5 target layers, no embeddings of its
own); tiny-* versions of each for local tests. TYPE: f16 or q8_0.
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
    n_layer: int            # trunk layers (MTP layers come on top: block_count = n_layer + nextn)
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    tied: bool
    ctx_train: int
    sliding_window: int = 0
    # gated DeltaNet (qwen35/qwen35moe): conv kernel, head dim (= state size), QK heads, V heads
    ssm: tuple[int, int, int, int] | None = None
    full_attn_interval: int = 4
    nextn: int = 0          # MTP layers
    experts: tuple[int, int, int, int] | None = None   # count, used, expert FFN, shared expert FFN
    target_layers: tuple[int, ...] = ()                 # dflash: target layers it reads


QWEN_SSM = (4, 128, 16, 48)
PRESETS: dict[str, Shape] = {
    "llama-1b": Shape("llama", 16, 2048, 32, 8, 8192, 64, True, 131072),
    "llama-8b": Shape("llama", 32, 4096, 32, 8, 14336, 128, False, 131072),
    "gemma3-4b": Shape("gemma3", 34, 2560, 8, 4, 10240, 256, True, 131072, 1024),
    "hybrid27": Shape("qwen35", 16, 5120, 24, 4, 17408, 256, False, 262144, ssm=QWEN_SSM, nextn=1),
    "moe35": Shape("qwen35moe", 12, 2048, 16, 2, 0, 256, False, 262144, ssm=(4, 128, 16, 32), nextn=1,
                   experts=(256, 8, 512, 512)),
    "hybrid08": Shape("qwen35", 24, 1024, 8, 2, 3584, 256, True, 262144, ssm=(4, 128, 16, 16)),
    "dflash27": Shape("dflash", 5, 5120, 32, 8, 17408, 128, True, 262144, target_layers=(2, 5, 9, 12, 15)),
    # run 4 (held out): shapes the estimator was not fitted on
    "hybrid9": Shape("qwen35", 16, 4096, 16, 4, 12288, 256, False, 262144, ssm=(4, 128, 16, 32), nextn=1),
    "next80": Shape("qwen3next", 4, 2048, 16, 2, 0, 256, False, 262144, ssm=(4, 128, 16, 32),
                    experts=(512, 10, 512, 512)),
    # run 5 (held out for the MoE offload rule): a third MoE, attention only (qwen3moe, no shared expert)
    "moe30": Shape("qwen3moe", 8, 2048, 32, 4, 0, 128, False, 40960, experts=(128, 8, 768, 0)),
    "tiny-moe30": Shape("qwen3moe", 2, 128, 4, 2, 0, 32, False, 4096, experts=(16, 4, 64, 0)),
    "dflash9": Shape("dflash", 5, 4096, 32, 8, 12288, 128, True, 262144, target_layers=(1, 4, 8, 11, 14)),
    "tiny-llama": Shape("llama", 2, 128, 4, 2, 256, 32, False, 4096),
    "tiny-next": Shape("qwen3next", 4, 256, 4, 2, 0, 64, False, 4096, ssm=(4, 32, 4, 8), experts=(16, 4, 64, 64)),
    "tiny-gemma3": Shape("gemma3", 7, 64, 4, 2, 128, 32, True, 4096, 128),
    "tiny-hybrid": Shape("qwen35", 8, 256, 4, 2, 512, 64, False, 4096, ssm=(4, 32, 4, 8), nextn=1),
    "tiny-moe": Shape("qwen35moe", 4, 256, 4, 2, 0, 64, False, 4096, ssm=(4, 32, 4, 8), nextn=1,
                      experts=(16, 4, 64, 64)),
    "tiny-hybrid-draft": Shape("qwen35", 4, 128, 4, 2, 256, 32, True, 4096, ssm=(4, 32, 2, 4)),
    "tiny-dflash": Shape("dflash", 2, 256, 4, 2, 512, 64, True, 4096, target_layers=(1, 4)),
}
FILE_TYPES = {"f16": 1, "q8_0": 7}
PATTERN_BYTES = 1 << 24
Tensors = list[tuple[str, tuple[int, ...], bool]]


def save_vocab(source: Path, target: Path, pad_to: int = 0) -> None:
    """Copy every tokenizer.* key of a GGUF into gzipped JSON (GGUFReader is slow; do it once, here).

    pad_to: append unused tokens up to this vocabulary size (Qwen3.6's 248,320-token embedding)."""
    reader = GGUFReader(source)
    vocab: dict[str, Any] = {}
    for name, item in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = item.contents()
        kind = item.types[-1] if item.types[0] == GGUFValueType.ARRAY else item.types[0]
        vocab[name] = {"type": int(item.types[0]), "sub": int(kind), "value": value}
    tokens = vocab.get("tokenizer.ggml.tokens", {}).get("value", [])
    if pad_to > len(tokens):
        extra = pad_to - len(tokens)
        tokens.extend(f"<|specd_unused_{index}|>" for index in range(extra))
        vocab["tokenizer.ggml.token_type"]["value"].extend([5] * extra)   # LLAMA_TOKEN_TYPE_UNUSED
    with gzip.open(target, "wt", encoding="utf-8") as handle:
        json.dump(vocab, handle)
    print(f"{target}: {len(vocab)} tokenizer keys, {len(tokens)} tokens")


def load_vocab(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def _attention(shape: Shape, prefix: str, gated: bool) -> Tensors:
    q_dim, kv_dim = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    return [(prefix + "attn_q.weight", (shape.n_embd, q_dim * (2 if gated else 1)), True),
            (prefix + "attn_k.weight", (shape.n_embd, kv_dim), True),
            (prefix + "attn_v.weight", (shape.n_embd, kv_dim), True),
            (prefix + "attn_output.weight", (q_dim, shape.n_embd), True)]


def _ffn(shape: Shape, prefix: str) -> Tensors:
    if shape.experts is None:
        return [(prefix + "ffn_gate.weight", (shape.n_embd, shape.n_ff), True),
                (prefix + "ffn_up.weight", (shape.n_embd, shape.n_ff), True),
                (prefix + "ffn_down.weight", (shape.n_ff, shape.n_embd), True)]
    count, _, n_ff_exp, n_ff_shexp = shape.experts
    routed: Tensors = [(prefix + "ffn_gate_inp.weight", (shape.n_embd, count), False),
                       (prefix + "ffn_gate_exps.weight", (shape.n_embd, n_ff_exp, count), True),
                       (prefix + "ffn_up_exps.weight", (shape.n_embd, n_ff_exp, count), True),
                       (prefix + "ffn_down_exps.weight", (n_ff_exp, shape.n_embd, count), True)]
    if not n_ff_shexp:
        return routed
    return routed + [(prefix + "ffn_gate_inp_shexp.weight", (shape.n_embd,), False),
                     (prefix + "ffn_gate_shexp.weight", (shape.n_embd, n_ff_shexp), True),
                     (prefix + "ffn_up_shexp.weight", (shape.n_embd, n_ff_shexp), True),
                     (prefix + "ffn_down_shexp.weight", (n_ff_shexp, shape.n_embd), True)]


def _qwen35_layer(shape: Shape, index: int) -> Tensors:
    """One qwen35/qwen35moe block as llama.cpp's loader wants it (src/models/qwen35*.cpp)."""
    prefix = f"blk.{index}."
    found: Tensors = [(prefix + "attn_norm.weight", (shape.n_embd,), False),
                      (prefix + "post_attention_norm.weight", (shape.n_embd,), False)]
    assert shape.ssm is not None
    conv, head, k_heads, v_heads = shape.ssm
    recurrent = index < shape.n_layer and (index + 1) % shape.full_attn_interval != 0
    if recurrent:
        key_dim, value_dim = head * k_heads, head * v_heads
        found += [(prefix + "attn_qkv.weight", (shape.n_embd, 2 * key_dim + value_dim), True),
                  (prefix + "attn_gate.weight", (shape.n_embd, value_dim), True),
                  (prefix + "ssm_conv1d.weight", (conv, 2 * key_dim + value_dim), False),
                  (prefix + "ssm_dt.bias", (v_heads,), False), (prefix + "ssm_a", (v_heads,), False),
                  *([(prefix + "ssm_ba.weight", (shape.n_embd, 2 * v_heads), True)] if shape.arch == "qwen3next"
                    else [(prefix + "ssm_beta.weight", (shape.n_embd, v_heads), True),
                          (prefix + "ssm_alpha.weight", (shape.n_embd, v_heads), True)]),
                  (prefix + "ssm_norm.weight", (head,), False),
                  (prefix + "ssm_out.weight", (value_dim, shape.n_embd), True)]
    else:
        found += _attention(shape, prefix, gated=True)
        found += [(prefix + "attn_q_norm.weight", (shape.head_dim,), False),
                  (prefix + "attn_k_norm.weight", (shape.head_dim,), False)]
    found += _ffn(shape, prefix)
    if index >= shape.n_layer:   # the MTP block: a gated-attention layer plus its NextN projection
        found += [(prefix + "nextn.eh_proj.weight", (2 * shape.n_embd, shape.n_embd), True),
                  (prefix + "nextn.enorm.weight", (shape.n_embd,), False),
                  (prefix + "nextn.hnorm.weight", (shape.n_embd,), False),
                  (prefix + "nextn.shared_head_norm.weight", (shape.n_embd,), False)]
    return found


def tensors(shape: Shape, n_vocab: int) -> Tensors:
    """(name, ggml ne, is_matrix) for every tensor llama.cpp's loader wants for this shape."""
    if shape.arch == "dflash":   # embeddings and output head come from the target (ctx_other)
        found: Tensors = [("fc.weight", (shape.n_embd * len(shape.target_layers), shape.n_embd), True),
                          ("enc.output_norm.weight", (shape.n_embd,), False),
                          ("output_norm.weight", (shape.n_embd,), False)]
    else:
        found = [("token_embd.weight", (shape.n_embd, n_vocab), True),
                 ("output_norm.weight", (shape.n_embd,), False)]
    if not shape.tied:
        found.append(("output.weight", (shape.n_embd, n_vocab), True))
    for index in range(shape.n_layer + shape.nextn):
        prefix = f"blk.{index}."
        if shape.arch.startswith("qwen3") and shape.ssm is not None:
            found += _qwen35_layer(shape, index)
            continue
        found += [(prefix + "attn_norm.weight", (shape.n_embd,), False), *_attention(shape, prefix, False),
                  (prefix + "ffn_norm.weight", (shape.n_embd,), False), *_ffn(shape, prefix)]
        if shape.arch in ("gemma3", "dflash", "qwen3moe"):
            found += [(prefix + "attn_q_norm.weight", (shape.head_dim,), False),
                      (prefix + "attn_k_norm.weight", (shape.head_dim,), False)]
        if shape.arch == "gemma3":
            found += [(prefix + "post_attention_norm.weight", (shape.n_embd,), False),
                      (prefix + "post_ffw_norm.weight", (shape.n_embd,), False)]
    return found


def _metadata(writer: GGUFWriter, shape: Shape, n_vocab: int) -> None:
    arch = shape.arch
    for key, value in {"context_length": shape.ctx_train, "embedding_length": shape.n_embd,
                       "block_count": shape.n_layer + shape.nextn, "feed_forward_length": shape.n_ff,
                       "attention.head_count": shape.n_head, "attention.head_count_kv": shape.n_head_kv,
                       "attention.key_length": shape.head_dim, "attention.value_length": shape.head_dim}.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6 if arch != "llama" else 1e-5)
    writer.add_float32(f"{arch}.rope.freq_base", 500000.0 if arch == "llama" else 1000000.0)
    if arch == "llama":
        writer.add_uint32(f"{arch}.rope.dimension_count", shape.head_dim)
        writer.add_uint32(f"{arch}.vocab_size", n_vocab)
    if shape.sliding_window:
        writer.add_uint32(f"{arch}.attention.sliding_window", shape.sliding_window)
    if shape.ssm is not None:
        conv, head, k_heads, v_heads = shape.ssm
        writer.add_uint32(f"{arch}.rope.dimension_count", shape.head_dim // 4)   # partial rotary 0.25
        half = shape.head_dim // 8
        writer.add_array(f"{arch}.rope.dimension_sections", [half * 11 // 32, half * 11 // 32,
                                                             half - 2 * (half * 11 // 32), 0])
        for key, value in {"ssm.conv_kernel": conv, "ssm.state_size": head, "ssm.group_count": k_heads,
                           "ssm.time_step_rank": v_heads, "ssm.inner_size": head * v_heads,
                           "full_attention_interval": shape.full_attn_interval}.items():
            writer.add_uint32(f"{arch}.{key}", value)
    if shape.nextn:
        writer.add_uint32(f"{arch}.nextn_predict_layers", shape.nextn)
    if shape.experts is not None:
        count, used, n_ff_exp, n_ff_shexp = shape.experts
        for key, value in {"expert_count": count, "expert_used_count": used,
                           "expert_feed_forward_length": n_ff_exp,
                           "expert_shared_feed_forward_length": n_ff_shexp}.items():
            writer.add_uint32(f"{arch}.{key}", value)
    if shape.target_layers:
        writer.add_array(f"{arch}.target_layers", list(shape.target_layers))
        writer.add_uint32(f"{arch}.block_size", 16)
        writer.add_array(f"{arch}.rope.dimension_sections", [shape.head_dim // 2, 0, 0, 0])  # M-RoPE target
        writer.add_uint32("tokenizer.ggml.mask_token_id", n_vocab - 1)


def _patterns(seed: int) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    f16 = (rng.standard_normal(PATTERN_BYTES // 2) * 0.02).astype(np.float16).view(np.uint8)
    blocks = PATTERN_BYTES // 34
    q8 = np.empty((blocks, 34), dtype=np.uint8)
    q8[:, :2] = np.full(blocks, 0.0005, dtype=np.float16).view(np.uint8).reshape(blocks, 2)
    q8[:, 2:] = rng.integers(-127, 128, size=(blocks, 32), dtype=np.int8).view(np.uint8)
    f32 = np.ones(PATTERN_BYTES // 4, dtype=np.float32).view(np.uint8)
    neg = np.full(PATTERN_BYTES // 4, -1.0, dtype=np.float32).view(np.uint8)
    return {"f16": f16, "q8_0": q8.reshape(-1), "f32": f32, "neg": neg}


def _fill(pattern: np.ndarray[Any, Any], nbytes: int, offset: int) -> np.ndarray[Any, Any]:
    start = offset % len(pattern)
    return np.resize(np.roll(pattern, -start) if start else pattern, nbytes)


def write_model(preset: str, weight_type: str, vocab_path: Path, out: Path, header_only: bool) -> None:
    shape = PRESETS[preset]
    vocab = load_vocab(vocab_path)
    n_vocab = len(vocab["tokenizer.ggml.tokens"]["value"])
    writer = GGUFWriter(out, shape.arch)
    writer.add_name(f"specd-vram-{preset}-{weight_type}")
    _metadata(writer, shape, n_vocab)
    writer.add_uint32("general.file_type", FILE_TYPES[weight_type])
    for key, item in vocab.items():
        if item["type"] == GGUFValueType.ARRAY:
            writer.add_key_value(key, item["value"], GGUFValueType.ARRAY, GGUFValueType(item["sub"]))
        else:
            writer.add_key_value(key, item["value"], GGUFValueType(item["type"]))

    matrix_type = GGMLQuantizationType.F16 if weight_type == "f16" else GGMLQuantizationType.Q8_0
    layout = []
    for name, ne, is_matrix in tensors(shape, n_vocab):
        ggml_type = matrix_type if is_matrix and ne[0] % 32 == 0 else GGMLQuantizationType.F32
        block, size = GGML_QUANT_SIZES[ggml_type]
        elements = int(np.prod(ne))
        nbytes = elements // block * size
        numpy_shape = tuple(reversed(ne))
        writer.add_tensor_info(name, numpy_shape, np.dtype(np.float32), nbytes, raw_dtype=ggml_type)
        kind = "f32" if ggml_type == GGMLQuantizationType.F32 else weight_type
        layout.append((nbytes, "neg" if name.endswith("ssm_a") else kind))   # decays below 1
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
    vocab.add_argument("--pad-to", type=int, default=0, help="append unused tokens up to this many")
    model = sub.add_parser("model")
    model.add_argument("preset", choices=sorted(PRESETS))
    model.add_argument("type", choices=sorted(FILE_TYPES))
    model.add_argument("vocab", type=Path)
    model.add_argument("out", type=Path)
    model.add_argument("--header-only", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "vocab":
        save_vocab(args.source, args.target, args.pad_to)
    else:
        write_model(args.preset, args.type, args.vocab, args.out, args.header_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
