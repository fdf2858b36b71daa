"""Tiny random BART and T5 backbones (2 layers, d_model 32, 128 positions), their specs, every registered
method with the settings it declares for them, and ragged batches: what the decoding, GPU, compat and
fast-step tests share. And one tiny random model of each routed decoder-only family (3 layers, width 32), in
float64: what the causal-span and causal-class tests share."""

from __future__ import annotations

import torch
from transformers import (
    AutoModelForCausalLM,
    BartConfig,
    BartForConditionalGeneration,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    T5Config,
    T5ForConditionalGeneration,
)

from scaleformer.methods import REGISTRY
from scaleformer.model.spec import BackboneSpec

BART = BackboneSpec(max_positions=128, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=32,
                    n_encoder_layers=2, n_decoder_layers=2)
T5 = BackboneSpec(max_positions=128, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=32,
                  n_encoder_layers=2, n_decoder_layers=2)
# Every registered method, with the settings it declares for these backbones (Method.small_settings):
# stock cross-attention (truncation, SLED, ScaleFormer, the span methods) and the patched retrieval
# layers (Unlimiformer, Memorizing's gated layer). A method added to the registry joins the matrix.
METHODS = [(name, dict(cls.small_settings)) for name, cls in sorted(REGISTRY.items())]
SMALL = REGISTRY["sled"].small_settings


def tiny(arch: str):
    torch.manual_seed(0)
    if arch == "bart":
        cfg = BartConfig(vocab_size=120, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                         init_std=0.2, attn_implementation="sdpa")
        return BartForConditionalGeneration(cfg).eval(), BART
    cfg = T5Config(vocab_size=120, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   attn_implementation="sdpa")
    return T5ForConditionalGeneration(cfg).eval(), T5


def batch(lengths: list[int], spec: BackboneSpec, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random documents (ragged) with the backbone's specials."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), spec.pad_id)
    for b, n in enumerate(lengths):
        doc = torch.randint(3, 120, (n,), generator=g)
        doc[: len(spec.prefix_ids)] = torch.tensor(spec.prefix_ids, dtype=torch.long)
        doc[n - len(spec.suffix_ids):] = torch.tensor(spec.suffix_ids, dtype=torch.long)
        ids[b, :n] = doc
    return ids, (ids != spec.pad_id).long()


CAUSAL_VOCAB, CAUSAL_LAYERS = 61, 3
_CAUSAL = {"vocab_size": CAUSAL_VOCAB, "hidden_size": 32, "num_hidden_layers": CAUSAL_LAYERS, "intermediate_size": 64}
CAUSAL_SHAPES = {
    "gpt2": lambda: GPT2Config(vocab_size=CAUSAL_VOCAB, bos_token_id=1, eos_token_id=2, n_embd=32,
                               n_layer=CAUSAL_LAYERS, n_head=4, n_positions=128),
    "gpt_neox": lambda: GPTNeoXConfig(**_CAUSAL, num_attention_heads=4, max_position_embeddings=512),
    "llama": lambda: LlamaConfig(**_CAUSAL, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512),
    "mistral": lambda: MistralConfig(**_CAUSAL, num_attention_heads=4, num_key_value_heads=2, sliding_window=None,
                                     max_position_embeddings=512),
    "qwen2": lambda: Qwen2Config(**_CAUSAL, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512),
}


def tiny_causal(family: str, seed: int = 0, **overrides) -> torch.nn.Module:
    torch.manual_seed(seed)
    conf = CAUSAL_SHAPES[family]()
    for k, v in overrides.items():
        setattr(conf, k, v)
    return AutoModelForCausalLM.from_config(conf, attn_implementation="sdpa").eval().double()
