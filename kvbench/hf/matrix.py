"""The family matrix: every decoder type of the installed transformers, built tiny, run through kvbench.

For one ``model_type`` (a key of transformers' causal-LM auto mapping), ``tiny_config`` shrinks the
type's default config (hidden 64, 2 layers, 4 heads, 2 KV heads, vocabulary 256, 4 experts of 2
active, MLA ranks of 16, windows of 6 tokens), ``run_type`` builds it with seeded random weights (no
download), takes transformers' own greedy ``generate`` of each prompt alone as the reference, then
runs the same prompts through the engine on a paged pool small enough to preempt, with a token
budget that chunks the long prompts so that a short request shares its steps with a long one.
The outcome is one of

- ``exact``: every request's tokens equal generate's;
- ``refused``: the executor refused the model at construction (the message is kept);
- ``different``: the engine ran and some tokens differ (a silent difference: a bug);
- ``crash``: anything else raised (a bug);
- ``skipped``: transformers itself cannot build or generate the tiny type (not a kvbench outcome).

``python -m kvbench.hf.matrix [TYPE ...] [--json PATH]`` prints one line per type.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import traceback
import warnings
import zlib
from dataclasses import asdict, dataclass

import kvbench.hf  # noqa: F401  (HF_HUB_OFFLINE before transformers)
import torch
from omegaconf import OmegaConf

from allocators import build
from kvbench.config.errors import ConfigError
from kvbench.config.spec import model_geometry
from kvbench.engine import Engine, SchedulerConfig
from kvbench.executors.hf import HFExecutor
from kvbench.hf.model import geometry_fields
from kvbench.requests import Request

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=256, max_position_embeddings=256, head_dim=16,
             num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_num_experts=4,
             moe_topk=2, moe_intermediate_size=32, shared_expert_intermediate_size=32, n_shared_experts=1,
             kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
             first_k_dense_replace=1, n_group=1, topk_group=1, initializer_range=0.2, sliding_window=6,
             attention_dropout=0.0, hidden_dropout=0.0, dropout=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
             attn_pdrop=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=True, is_decoder=True,
             rotary_dim=8, kv_channels=16, keep_window_size=4, local_attention=6, attention_chunk_size=8,
             vocab_size_per_layer_input=256, hidden_size_per_layer_input=16, num_layers=2, ffn_hidden_size=128,
             expert_ffn_hidden_size=32, zero_expert_num=2, index_topk=8, index_head_dim=16, index_n_heads=2)
MAX_MODEL_LEN = 256
MAX_PARAMS = 20_000_000  # a type whose config did not shrink is skipped, not built
BUDGET = 16  # max_num_batched_tokens: prompts longer than this are chunked while others decode
NUM_SLOTS = 64


def decoder_types() -> list[str]:
    """Every model_type of the installed transformers' causal-LM auto mapping, sorted."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # start-up time: transformers' auto classes, only when a type is built

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def tiny_config(model_type: str, **overrides):
    """The type's default config shrunk to SMALL (only keys the config has), then ``overrides``."""
    from transformers import AutoConfig  # start-up time: transformers' auto classes, only when a type is built

    default = AutoConfig.for_model(model_type)
    known = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
    kwargs = {key: value for key, value in {**SMALL, **overrides}.items() if key in known or key in overrides}
    if getattr(default, "sliding_window", None) is None:
        kwargs.pop("sliding_window", None)
    if getattr(default, "q_lora_rank", 0) is None:
        kwargs.pop("q_lora_rank", None)
    if "qk_rope_head_dim" in kwargs and "head_dim" in kwargs:  # MLA: head_dim is the rope part
        kwargs["head_dim"] = kwargs["qk_rope_head_dim"]
    if "kv_lora_rank" in kwargs and "num_key_value_heads" in kwargs:  # MLA expands K/V to every query head
        kwargs["num_key_value_heads"] = kwargs["num_attention_heads"]
    layers = getattr(default, "num_hidden_layers", None)
    for key, value in default.to_dict().items():  # per-layer lists: the first two distinct entries
        if key not in overrides and isinstance(value, list) and len(value) == layers and layers > 2:
            kinds = list(dict.fromkeys(map(json.dumps, value)))
            kwargs[key] = [json.loads(k) for k in (kinds + kinds)[:2]]
    if isinstance(getattr(default, "per_layer_config", None), dict) and "per_layer_config" not in overrides:
        kwargs["per_layer_config"] = {"01": {"head_dim": 32}}  # the second layer's heads twice as wide
    try:
        config = AutoConfig.for_model(model_type, **kwargs)
    except (AttributeError, TypeError):  # a derived per-layer property: keep the type's own
        for key in [k for k, v in kwargs.items() if isinstance(v, list)]:
            kwargs.pop(key)
        config = AutoConfig.for_model(model_type, **kwargs)
    config.dtype = torch.float32
    return config


@dataclass(slots=True)
class Outcome:
    model_type: str
    outcome: str  # exact | refused | different | crash | skipped
    detail: str = ""


def _requests(model_type: str, vocab_size: int):
    """Prompts and seeds of this type alone: a long prompt chunked while short ones decode."""
    rng = random.Random(zlib.crc32(model_type.encode()))
    specs = [(rng.randint(30, 44), rng.randint(4, 8)), (rng.randint(2, 4), rng.randint(10, 16)),
             (rng.randint(8, 20), rng.randint(6, 12)), (rng.randint(20, 30), rng.randint(5, 10))]
    return [Request(i, [rng.randrange(vocab_size) for _ in range(p)], o, 0.0, 1, 1) for i, (p, o) in enumerate(specs)]


def build_tiny(config, seed: int = 0):
    """A tiny model of ``config`` with seeded random weights: SDPA, else the type's eager attention."""
    from transformers import AutoModelForCausalLM  # start-up time: transformers' auto classes, only when a type is built

    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in meta.parameters())
    if params > MAX_PARAMS:
        raise ValueError(f"the tiny config still has {params} parameters")
    for attn in ("sdpa", "eager"):
        torch.manual_seed(seed)
        try:
            return AutoModelForCausalLM.from_config(config, attn_implementation=attn).eval()
        except ValueError as exc:
            if attn == "eager" or "does not support" not in str(exc):
                raise
    raise AssertionError("unreachable")


def generate(model, request) -> list[int]:
    """transformers' greedy tokens for one unpadded prompt."""
    ids = torch.tensor([request.prompt_ids])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=request.output_len,
                             do_sample=False, eos_token_id=None, pad_token_id=0, min_new_tokens=request.output_len)
    return out[0, request.prompt_len:].tolist()


def model_cfg_of(model, name: str, max_model_len: int = MAX_MODEL_LEN):
    """A kvbench model config for a loaded model, its geometry read from the model's config as a user
    would write it (``kvbench.hf.model.geometry_fields``)."""
    fields = geometry_fields(model.config)
    return OmegaConf.create(dict(name=name, family=model.config.model_type, max_model_len=max_model_len,
                                 dtype="float32", load="dummy", num_params=None, **fields))


def run_type(model_type: str, allocator: str = "paged", seed: int | None = None, max_model_len: int = MAX_MODEL_LEN,
             **overrides) -> Outcome:
    """Build ``model_type`` tiny (``overrides`` on its config) and classify it (see the module docstring).
    The weights' seed (default: one of the type's own) and the prompts differ from type to type."""
    try:
        config = tiny_config(model_type, **overrides)
        model = build_tiny(config, zlib.crc32(model_type.encode()) % 10_000 if seed is None else seed)
        requests = _requests(model_type, int(config.get_text_config().vocab_size))
        expected = {r.request_id: generate(model, r) for r in requests}
    except Exception as exc:  # noqa: BLE001: transformers cannot build it small; not a kvbench outcome
        return Outcome(model_type, "skipped", _first_line(exc))
    return run_model(model_type, model, requests, expected, allocator, max_model_len)


def run_model(model_type: str, model, requests, expected, allocator: str = "paged",
              max_model_len: int = MAX_MODEL_LEN) -> Outcome:
    try:
        cfg = model_cfg_of(model, f"tiny-{model_type}", max_model_len)
        alloc = build(allocator, NUM_SLOTS, block_size=4, debug=True)
        engine_cfg = OmegaConf.create({"attention": "torch", "max_num_batched_tokens": BUDGET})
        executor = HFExecutor(cfg, engine_cfg, num_slots=NUM_SLOTS, block_size=4, geometry=model_geometry(cfg),
                              device="cpu", model=model)
    except ConfigError as exc:
        return Outcome(model_type, "refused", _first_line(exc))
    except Exception as exc:  # noqa: BLE001
        return Outcome(model_type, "crash", _crash(exc))
    try:
        engine = Engine(alloc, executor, SchedulerConfig(max_model_len=max_model_len, max_num_batched_tokens=BUDGET),
                        max_steps=3000)
        out = engine.run(requests)
    except Exception as exc:  # noqa: BLE001
        return Outcome(model_type, "crash", _crash(exc))
    got = {rid: samples[0] for rid, samples in out.outputs.items()}
    if got != expected:
        wrong = sorted(rid for rid in expected if got.get(rid) != expected[rid])
        return Outcome(model_type, "different", f"requests {wrong} differ from generate")
    prefill = out.steps["num_prefill_tokens"]
    mixed = int(((prefill > 0) & (prefill < out.steps["num_tokens"])).sum())  # prefill chunks next to decodes
    return Outcome(model_type, "exact", f"{len(requests)} requests, {out.summary['num_preemptions']} preemptions, "
                                        f"{mixed} mixed steps")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _crash(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {_first_line(exc)} ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", help="model types (default: every decoder type)")
    parser.add_argument("--json", help="also write the outcomes to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging  # start-up time: as above; after the warnings are off

    hf_logging.set_verbosity_error()
    outcomes = []
    for model_type in args.types or decoder_types():
        outcome = run_type(model_type)
        outcomes.append(outcome)
        print(f"{outcome.model_type:28s} {outcome.outcome:9s} {outcome.detail}", flush=True)
    counts = {kind: sum(o.outcome == kind for o in outcomes) for kind in
              ("exact", "refused", "different", "crash", "skipped")}
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(o) for o in outcomes], fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
