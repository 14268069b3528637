"""The ``offload`` config group: KV tiers behind the GPU prefix cache, their checks and their costs.

``check_offload(cfg)`` (called by the pre-check) refuses bad input with one line;
``build_tiers(cfg, slot_bytes, gpu_kv_bytes)`` makes the ``allocators.tiers.TierStack`` of a run
(None for ``offload=none``); ``LoadCost`` turns a step's loads into seconds on the critical path.

Sizes: ``host_bytes`` and ``disk_bytes`` in bytes, or ``host_gpu_multiple`` (x the run's GPU
KV bytes) instead of ``host_bytes``. A tier is on when its size is above 0; disk needs host.

Link costs (``LINKS``, chosen by the GPU profile's ``offload_link``): bytes / (bandwidth x the
profile's ``eff_host``) + one per-transfer latency per chunk. Disk reads go disk -> host ->
GPU, pipelined: the slower of the two sets the rate, and both latencies add. ``overlap`` hides a
step's load behind its compute up to the compute time; ``blocking`` adds it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from allocators.cache_policy import POLICIES
from allocators.tiers import LOAD_MODES, STORE_ORDERS, WRITE_MODES, Loads, TierStack
from kvbench.config.errors import ConfigError

# Per-direction bandwidth (bytes/s) and per-transfer latency (s) of the GPU's link to host memory.
LINKS: dict[str, dict[str, float | str]] = {
    # PCI-SIG PCIe 4.0 base spec: 16 GT/s x 16 lanes, 128b/130b -> 31.5 GB/s each way
    "pcie-gen4-x16": {"h2d": 31.5e9, "d2h": 31.5e9, "latency_s": 5.0e-6,
                      "source": "PCI-SIG PCIe 4.0 spec (16 GT/s, x16, 128b/130b); latency: cost model default"},
    # PCI-SIG PCIe 5.0 base spec: 32 GT/s x 16 lanes, 128b/130b -> 63.0 GB/s each way
    "pcie-gen5-x16": {"h2d": 63.0e9, "d2h": 63.0e9, "latency_s": 5.0e-6,
                      "source": "PCI-SIG PCIe 5.0 spec (32 GT/s, x16, 128b/130b); latency: cost model default"},
    # NVIDIA GH200 Grace Hopper datasheet: NVLink-C2C 900 GB/s total -> 450 GB/s each way
    "nvlink-c2c": {"h2d": 450.0e9, "d2h": 450.0e9, "latency_s": 1.0e-6,
                   "source": "NVIDIA GH200 datasheet (NVLink-C2C 900 GB/s bidirectional); latency: assumed 1 us"},
}
# The system profile's disk, when it names none: an NVMe PCIe 4.0 x4 SSD (Samsung 990 PRO data
# sheet: 7,450 MB/s sequential read, 6,900 MB/s write); ~100 us per read, the order published
# NVMe 4 KiB random-read measurements report (an assumption, not a measurement of ours).
DISK_DEFAULTS = {"disk_read_bandwidth": 7.45e9, "disk_write_bandwidth": 6.9e9, "disk_latency_s": 1.0e-4}


def _number(cfg, key: str, optional: bool = False) -> float | None:
    value = cfg.offload.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"offload.{key} must be a number >= 0{' or null' if optional else ''}; got {value!r}")
    return float(value)


def _host_bytes(cfg, gpu_kv_bytes: int | None) -> int:
    """The host tier's bytes: ``host_bytes``, or ``host_gpu_multiple`` x the GPU's KV bytes
    (without ``gpu_kv_bytes``: 1 when the multiple is above 0, so the checks see the tier on)."""
    multiple = _number(cfg, "host_gpu_multiple", optional=True)
    fixed = _number(cfg, "host_bytes")
    if multiple is not None and fixed:
        raise ConfigError("offload.host_bytes and offload.host_gpu_multiple are both set; "
                          "set one (host_bytes=0 or host_gpu_multiple=null)")
    if multiple is not None:
        return int(multiple * gpu_kv_bytes) if gpu_kv_bytes is not None else int(multiple > 0)
    return int(fixed)


def check_offload(cfg) -> None:
    """Refuse bad offload settings with one line naming the setting (ConfigError)."""
    link = cfg.get("gpu", {}).get("offload_link")
    if link is not None and link not in LINKS:
        raise ConfigError(f"gpu.offload_link must be one of {', '.join(LINKS)}; got {link!r}")
    off = cfg.get("offload")
    if off is None:
        return
    host = _host_bytes(cfg, None) > 0
    disk = _number(cfg, "disk_bytes") > 0
    for key in ("policy", "disk_policy"):
        value = off.get(key)
        if value is None and key == "disk_policy":
            continue
        if value not in POLICIES:
            raise ConfigError(f"offload.{key} must be one of {', '.join(POLICIES)}; got {value!r}")
    if off.get("write") not in WRITE_MODES:
        raise ConfigError(f"offload.write must be one of {', '.join(WRITE_MODES)}; got {off.get('write')!r}")
    if off.get("load") not in LOAD_MODES:
        raise ConfigError(f"offload.load must be one of {', '.join(LOAD_MODES)}; got {off.get('load')!r}")
    order = off.get("store_order", "head_first")
    if order not in STORE_ORDERS:
        raise ConfigError(f"offload.store_order must be one of {', '.join(STORE_ORDERS)}; got {order!r}")
    if disk and not host:
        raise ConfigError("offload.disk_bytes: a disk tier needs a host tier (offload.host_bytes > 0)")
    block = cfg.allocator.get("block_size")
    tokens = off.get("block_tokens")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ConfigError(f"offload.block_tokens must be an integer >= 1 or null (the GPU block); got {tokens!r}")
        if isinstance(block, int) and tokens % block:
            raise ConfigError(f"offload.block_tokens must be a multiple of the GPU block "
                              f"(allocator.block_size={block}); got {tokens}")
    if not host:
        return
    if cfg.allocator.get("name") != "paged_prefix":
        raise ConfigError(f"offload needs an allocator that hashes prefixes (paged_prefix); "
                          f"allocator {cfg.allocator.get('name')} cannot")
    if cfg.backend.name != "sim" and disk:
        raise ConfigError("offload.disk_bytes: backend=hf keeps a host tier only (set offload.disk_bytes=0)")
    if link is None and cfg.backend.name == "sim":
        raise ConfigError(f"gpu.offload_link is missing; it must be one of {', '.join(LINKS)}")


def check_tier_sizes(cfg, slot_bytes: int, gpu_kv_bytes: int, block_size: int) -> None:
    """Refuse a tier that is on but holds not one chunk (``block_tokens`` x the slot bytes): a
    size that rounds to nothing is refused, never dropped with the tiers behind it."""
    off = cfg.get("offload")
    if off is None or not _host_bytes(cfg, None):
        return
    chunk = slot_bytes * int(off.get("block_tokens") or block_size)
    host = _host_bytes(cfg, gpu_kv_bytes)
    what = f"less than one chunk of {int(off.get('block_tokens') or block_size)} tokens ({chunk:,} bytes)"
    multiple = _number(cfg, "host_gpu_multiple", optional=True)
    if host < chunk and multiple is not None:
        raise ConfigError(f"offload.host_gpu_multiple={multiple:g} makes a host tier of {host:,} bytes ({multiple:g} x "
                          f"{gpu_kv_bytes:,} GPU KV bytes), {what}: it would hold nothing; set it >= "
                          f"{chunk / gpu_kv_bytes:.3g}, or offload=none")
    if host < chunk:
        raise ConfigError(f"offload.host_bytes={host:,} is {what}: the host tier would hold nothing; set it >= "
                          f"{chunk:,}, or offload.host_bytes=0 for no tier")
    disk = int(_number(cfg, "disk_bytes"))
    if 0 < disk < chunk:
        raise ConfigError(f"offload.disk_bytes={disk:,} is {what}: the disk tier would hold nothing; set it >= "
                          f"{chunk:,}, or offload.disk_bytes=0 for no disk tier")


def build_tiers(cfg, slot_bytes: int, gpu_kv_bytes: int, block_size: int, debug: bool) -> TierStack | None:
    """The run's tiers, or None when no host tier is on (a tier too small to hold a chunk raises)."""
    off = cfg.get("offload")
    if off is None:
        return None
    check_tier_sizes(cfg, slot_bytes, gpu_kv_bytes, block_size)
    host = _host_bytes(cfg, gpu_kv_bytes)
    if host <= 0:
        return None
    policy = str(off.policy)
    return TierStack(slot_bytes=slot_bytes, gpu_block_tokens=block_size,
                     block_tokens=int(off.get("block_tokens") or block_size), host_bytes=host,
                     disk_bytes=int(_number(cfg, "disk_bytes")), host_policy=policy,
                     disk_policy=str(off.get("disk_policy") or policy), write=str(off.write),
                     store_order=str(off.get("store_order", "head_first")), debug=debug)


@dataclass(frozen=True)
class LoadCost:
    """Seconds a step's loads take: host over the link, disk through the host to the GPU."""

    h2d_rate: float  # bytes/s host -> GPU, after the profile's efficiency
    link_latency_s: float
    disk_rate: float  # bytes/s disk -> host
    disk_latency_s: float
    overlap: bool
    gpu_count: int

    @classmethod
    def from_configs(cls, cfg) -> LoadCost:
        from kvbench.sim.cost_model import DEFAULTS  # start-up time: the cost model's tables, only with a tier on

        link = LINKS[str(cfg.gpu.offload_link)]
        eff = float(cfg.gpu.get("eff_host") or DEFAULTS["eff_host"])
        system = cfg.get("system") or {}
        disk_bw = system.get("disk_read_bandwidth") or DISK_DEFAULTS["disk_read_bandwidth"]
        disk_lat = system.get("disk_latency_s") or DISK_DEFAULTS["disk_latency_s"]
        return cls(float(link["h2d"]) * eff, float(link["latency_s"]), float(disk_bw), float(disk_lat),
                   str(cfg.offload.load) == "overlap", int(cfg.gpu.get("count", 1) or 1))

    def seconds(self, loads: Loads) -> float:
        """Transfer time of ``loads``; in tensor parallel each GPU loads its own share in parallel."""
        n = self.gpu_count
        t = 0.0
        if loads.host_bytes:
            t += loads.host_bytes / n / self.h2d_rate + loads.host_transfers * self.link_latency_s
        if loads.disk_bytes:
            # every GPU's share crosses the one disk: the disk rate is not divided
            t += (max(loads.disk_bytes / self.disk_rate, loads.disk_bytes / n / self.h2d_rate)
                  + loads.disk_transfers * (self.disk_latency_s + self.link_latency_s))
        return t

    def critical(self, loads: Loads, compute_s: float) -> float:
        """Seconds the step grows by: all of the load when blocking, what compute does not hide when overlapping."""
        t = self.seconds(loads)
        return max(0.0, t - compute_s) if self.overlap else t
