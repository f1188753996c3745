"""Where the bytes of a GGUF's tensors go: per repeating layer (and within it, expert weights and
row-splittable matrices apart), the input embedding, the output head.

llama.cpp (llama-model.cpp load_tensors) keeps the token embedding in host memory always, places
block N on the device of layer N, and the output head on the device after the last layer; a model
without `output.weight` gets a device copy of the embedding as its head. `--cpu-moe`/`--n-cpu-moe`
keep tensors matching `\\.ffn_(up|down|gate|gate_up)_(ch|)exps` of the chosen layers in host memory
(common/common.h LLM_FFN_EXPS_REGEX); `--split-mode row` splits the 2-D matrices multiplied with
MUL_MAT across GPUs (ggml-cuda's split buffer type), never the 3-D expert tensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from specd.errors import PreflightError
from specd.gpu.arch import vocab_size
from specd.gpu.gguf import GgufInfo, Tensor, read_gguf_info

FLOAT_TYPES = {0, 1, 30}   # GGML F32, F16, BF16
_BLOCK = re.compile(r"blk\.(\d+)\.")
EXPERT_TENSOR = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")


@dataclass(frozen=True)
class WeightLayout:
    """Tensor bytes of a GGUF grouped by where llama.cpp places them."""

    layer_bytes: tuple[int, ...]       # everything of block N, experts included
    input_bytes: int
    output_bytes: int
    has_output_weight: bool
    embedding_bytes: int
    n_vocab: int | None
    float_matrices: bool = False
    expert_bytes: tuple[int, ...] = ()   # of block N, the expert tensors (--cpu-moe moves these)
    matrix_bytes: tuple[int, ...] = ()   # of block N, 2-D matrices (what --split-mode row splits)
    output_matrix_bytes: int = 0
    largest_bytes: tuple[int, ...] = ()    # of block N, its largest single tensor
    largest_expert_bytes: tuple[int, ...] = ()   # of block N, its largest expert tensor

    def largest_of(self, index: int) -> int:
        return self.largest_bytes[index] if index < len(self.largest_bytes) else 0

    def largest_expert_of(self, index: int) -> int:
        return self.largest_expert_bytes[index] if index < len(self.largest_expert_bytes) else 0

    def experts_of(self, index: int) -> int:
        return self.expert_bytes[index] if index < len(self.expert_bytes) else 0

    def matrices_of(self, index: int) -> int:
        return self.matrix_bytes[index] if index < len(self.matrix_bytes) else 0


@lru_cache(maxsize=32)
def _cached_layout(path: Path, size: int, mtime_ns: int) -> WeightLayout:
    return layout_of(read_gguf_info(path).tensors)


def layout_of(tensors: tuple[Tensor, ...]) -> WeightLayout:
    """Group tensor bytes by where llama-server places them: per repeating layer, input, output."""
    layers: dict[int, int] = {}
    experts: dict[int, int] = {}
    matrices: dict[int, int] = {}
    largest: dict[int, int] = {}
    largest_expert: dict[int, int] = {}
    input_bytes = output_bytes = embedding_bytes = output_matrices = 0
    has_output = floats = False
    n_vocab: int | None = None
    for tensor in tensors:
        block = _BLOCK.match(tensor.name)
        matrix = len(tensor.dims) == 2 and tensor.dims[1] > 1
        if block:
            index = int(block.group(1))
            floats = floats or (len(tensor.dims) >= 2 and tensor.dims[1] > 1 and "conv" not in tensor.name
                                and tensor.ggml_type in FLOAT_TYPES)   # multiplied through cuBLAS
            layers[index] = layers.get(index, 0) + tensor.nbytes
            largest[index] = max(largest.get(index, 0), tensor.nbytes)
            if EXPERT_TENSOR.search(tensor.name):
                experts[index] = experts.get(index, 0) + tensor.nbytes
                largest_expert[index] = max(largest_expert.get(index, 0), tensor.nbytes)
            elif matrix:
                matrices[index] = matrices.get(index, 0) + tensor.nbytes
        elif tensor.name.startswith("token_embd."):
            input_bytes += tensor.nbytes
            if tensor.name == "token_embd.weight":
                embedding_bytes = tensor.nbytes
                n_vocab = tensor.dims[1] if len(tensor.dims) > 1 else None
        else:
            output_bytes += tensor.nbytes
            output_matrices += tensor.nbytes if matrix else 0
            has_output = has_output or tensor.name == "output.weight"
    count = max(layers, default=-1) + 1
    return WeightLayout(tuple(layers.get(i, 0) for i in range(count)), input_bytes, output_bytes, has_output,
                        embedding_bytes, n_vocab, floats, tuple(experts.get(i, 0) for i in range(count)),
                        tuple(matrices.get(i, 0) for i in range(count)), output_matrices,
                        tuple(largest.get(i, 0) for i in range(count)),
                        tuple(largest_expert.get(i, 0) for i in range(count)))


def read_weight_layout(path: Path) -> WeightLayout:
    """Group a GGUF's tensor bytes by placement (reads the header only; cached per file version)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise PreflightError(f"{path}: no such model file") from exc
    return _cached_layout(path, stat.st_size, stat.st_mtime_ns)


def approximate_layout(info: GgufInfo) -> WeightLayout:
    """Weights spread evenly over the layers, for a header whose tensor table cannot be read."""
    layers = max(info.block_count or 1, 1)
    share = info.tensor_bytes // layers
    return WeightLayout((share,) * layers, 0, info.tensor_bytes - share * layers, True, 0,
                        vocab_size(info) or None, info.file_type in (0, 1, 32))
