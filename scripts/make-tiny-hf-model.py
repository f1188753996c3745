"""Write a tiny random-weight Llama model in Hugging Face format, with a tokenizer built offline.

vLLM loads Hugging Face model directories (config.json, safetensors, tokenizer files); no hub
download is possible here, so the tests' vLLM model is made locally: 2 layers, hidden 128 (head_dim 64: vLLM's CPU attention refuses head_dim 16), a
word-level tokenizer over a fixed vocabulary, a chat template. Its answers are noise, which is
all a health gate, a switch and a bench need. Run it with an interpreter that has torch and
transformers (the vLLM environment): `VENV/bin/python scripts/make-tiny-hf-model.py DIR`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


def _vocabulary(size: int) -> list[str]:
    words = ("the a of to and in is it you that he was for on are as with his they at be this have from or one had "
             "by word but not what all were we when your can said there use an each which she do how their if will "
             "up other about out many then them these so some her would make like him into time has look two more "
             "write go see number no way could people my than first water been call who oil its now find long down "
             "day did get come made may part ok yes say code def return print import class list value key name "
             "file line test true false none data model server profile switch fast slow").split()
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    digits = [str(d) for d in range(10)]
    punctuation = list(".,:;!?()[]{}'\"-_=+*/<>#")
    vocab = SPECIAL + list(dict.fromkeys(words + letters + digits + punctuation))
    filler = 0
    while len(vocab) < size:
        vocab.append(f"w{filler}")
        filler += 1
    return vocab[:size]


def write_tokenizer(directory: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(_vocabulary(vocab_size))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", additional_special_tokens=SPECIAL[3:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)


def write_model(directory: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)
    # generation_config.json: no sampling defaults that would differ from the request's own
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: make-tiny-hf-model.py DIRECTORY")
    directory = Path(sys.argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = 512
    write_tokenizer(directory, vocab_size)
    write_model(directory, vocab_size)
    print(directory)


if __name__ == "__main__":
    main()
