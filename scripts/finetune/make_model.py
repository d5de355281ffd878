"""The starting point of scripts/finetune_demo.sh: a small Llama-shaped model as a Hugging Face user
has one — written by transformers at random (no hub access), with a byte-level BPE tokenizer
trained here by `tokenizers` (Llama 3's split pattern and special tokens) and a tokenizer_config.json
carrying Llama 3.1's published chat template.

Usage: make_model.py --chat FILE.jsonl --template FILE.jinja --out DIR
Writes DIR/config.json, DIR/model.safetensors, DIR/tokenizer.json, DIR/tokenizer_config.json.
"""
import argparse
import json
import os

import tokenizers
import torch
import transformers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def byte_level_bpe(texts, split, special, vocab_size, added=(), nfc=False):
    """A byte-level BPE trained by `tokenizers` on TEXTS: the SPLIT regex (isolated) then ByteLevel
    without its own regex, SPECIAL tokens first, ADDED tokens (normalized=false) after; NFC as
    Qwen's tokenizers have it when NFC. (Also used by tests/reference/chat_preprocess_reference.py.)"""
    tok = tokenizers.Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                                       show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in added])
    return tok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chat", required=True)
    p.add_argument("--template", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    texts = [m["content"] for line in open(args.chat, encoding="utf-8") for m in json.loads(line)["messages"]]
    texts.append("system user assistant Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n")
    tok = byte_level_bpe(texts, LLAMA3_SPLIT, LLAMA_SPECIAL, 512)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"chat_template": open(args.template, encoding="utf-8").read(), "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|eot_id|>", "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    torch.manual_seed(7)
    config = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=192,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=500000.0,
                                      tie_word_embeddings=False, bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                                      eos_token_id=tok.token_to_id("<|eot_id|>"))
    transformers.LlamaForCausalLM(config).save_pretrained(args.out, safe_serialization=True)
    print(f"make_model: {args.out}: Llama-shaped, {sum(1 for _ in texts)} texts for a {tok.get_vocab_size()}-token "
          f"tokenizer; end of document <|end_of_text|> = {tok.token_to_id('<|end_of_text|>')}")


if __name__ == "__main__":
    main()
