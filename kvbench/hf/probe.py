"""Run a model once through the paged-attention hook, recording what each layer asks of it.

``probe_layers`` sits above both ``kvbench.hf.attention`` (the hook) and ``kvbench.hf.features``
(what a layer's call means), so neither of those imports the other's caller.
"""
from __future__ import annotations

import torch

from kvbench.config.errors import ConfigError
from kvbench.hf.attention import step_attention
from kvbench.hf.features import AttentionProbe, UnsupportedAttention, check_model_features


def probe_layers(model, num_layers: int, max_model_len: int, max_step_tokens: int | None = None) -> AttentionProbe:
    """Run ``model`` (already on the paged hook) on one token; what every layer's attention asked for.

    Raises UnsupportedAttention for a feature the hook cannot honour, and ConfigError when some
    layer does not call the hook (a model that bypasses transformers' attention registry) or calls
    it more than once per forward."""
    check_model_features(model.config.get_text_config(), max_model_len, max_step_tokens)
    probe = AttentionProbe()
    device = next(model.parameters()).device
    ids = torch.zeros((1, 1), dtype=torch.int64, device=device)
    name = type(model).__name__
    try:
        with torch.inference_mode(), step_attention(probe):
            model(input_ids=ids, position_ids=ids, use_cache=False)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001: a forward that needs what the packed step does not give it
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ConfigError(f"{name}: its forward fails on the paged hook's packed step (no attention mask, no KV "
                          f"cache object): {type(exc).__name__}: {first}") from None
    missing = [layer for layer in range(num_layers) if layer not in probe.layers]
    if missing:
        raise ConfigError(f"{name}: layer(s) {missing} do not call the paged attention hook; this "
                          "model does not route attention through transformers' AttentionInterface")
    extra = sorted(layer for layer in probe.layers if layer >= num_layers)
    if extra:
        raise ConfigError(f"{name}: attention layer(s) {extra} beyond model.num_layers {num_layers}")
    _check_token_independence(model, device, name)
    repeated = {layer: n for layer, n in sorted(probe.calls.items()) if n > 1}
    if repeated:
        layer, n = next(iter(repeated.items()))
        raise UnsupportedAttention(f"{name}: layer {layer} calls the attention function {n} times per forward "
                                   "(e.g. differential attention); the paged hook stores one K/V per layer and call")
    return probe


def _check_token_independence(model, device: torch.device, name: str) -> None:
    """With attention answering zeros, a sequence's logits must not depend on another packed before it
    in the row: else the model mixes tokens outside attention (recurrent or convolution layers, token
    shifts), and packed sequences would share that state."""
    vocab = model.config.get_text_config().vocab_size
    first, second = [1 % vocab, 2 % vocab], [3 % vocab, 4 % vocab]
    packed = torch.tensor([first + second], device=device)
    alone = torch.tensor([second], device=device)
    with torch.inference_mode(), step_attention(AttentionProbe()):
        mixed = model(input_ids=packed, position_ids=torch.tensor([[0, 1, 0, 1]], device=device),
                      use_cache=False).logits[0, 2:].float()
    with torch.inference_mode(), step_attention(AttentionProbe()):
        single = model(input_ids=alone, position_ids=torch.tensor([[0, 1]], device=device),
                       use_cache=False).logits[0].float()
    # float rounding of different row counts stays far below this; another sequence's state does not
    tolerance = 1e-3 if next(model.parameters()).dtype == torch.float32 else 3e-2
    if float((mixed - single).abs().max()) > tolerance * max(1.0, float(single.abs().max())):
        raise UnsupportedAttention(f"{name}: the model mixes tokens outside attention (e.g. recurrent, state-space "
                                   "or convolution layers): sequences packed into one step would share that state")
