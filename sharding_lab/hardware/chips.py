"""Chips: the published figures a step-time prediction needs, each with its source.

A prediction divides what the compiled program does (FLOPs, bytes, collective bytes) by what a
chip can do per second. The figures below are the vendors' or the JAX scaling book's
("How to Scale Your Model", Austin et al., jax-ml.github.io/scaling-book — chapters "How to Think
About TPUs" (tpus.md) and "How to Think About GPUs" (gpus.md)); every one names its source.
Nothing here is measured by this lab.

Conventions (all per chip, bytes and seconds):

- ``peak_flops[dtype]``: dense (no 2:4 sparsity) matrix-unit peak. NVIDIA's datasheets print the
  *sparse* figure with a footnote "specifications ½ lower without sparsity": the dense one is used.
- ``hbm_bytes_per_s`` and ``hbm_bytes``: HBM bandwidth and capacity.
- TPUs: ``ici_link_bytes_per_s`` is ONE direction of one ICI link. On an axis with a wraparound
  link (a full ring) a ring collective uses both directions (the scaling book's "bidirectional"
  bandwidth, 2×); without one, only one direction is usable for the ring. ``torus`` is the pod's
  physical shape (wraparounds exist on v5e/v6e only along a full 16-chip dimension; on v5p on
  dimensions that are multiples of 4 — tpus.md, footnote on bidirectional bandwidth).
  ``dcn_bytes_per_s`` is data-centre-network egress per chip (between slices).
- GPUs: ``nvlink_bytes_per_s`` is one direction of the GPU's NVLink (the datasheets' 900 GB/s for
  Hopper and 1.8 TB/s for Blackwell are both directions added); ``node_size`` GPUs share one
  NVLink domain; ``network_bytes_per_s`` is the GPU's own scale-out NIC (one 400 Gb/s ConnectX-7
  per GPU in a DGX) — one direction.
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError

GB = 1e9
GIB = 2**30
# What a TPU program may use of its chip's HBM, as the TPU compiler states it when it refuses a step that does
# not fit ("exceeds available HBM (15.75G)", in GiB); on a real v5e, memory_stats()["bytes_limit"] gave the same
# 16,909,336,064 bytes and steps the compiler accepted up to 16.67 GB ran (tools/tpu_check.py, README).
USABLE_SOURCE = "the TPU compiler's 'available HBM' (libtpu 0.0.42.1, compiling for the slice without it)"

BOOK_TPUS = "JAX scaling book, 'How to Think About TPUs', TPU Specs tables (jax-ml.github.io/scaling-book/tpus)"
BOOK_GPUS = "JAX scaling book, 'How to Think About GPUs', spec and node tables (jax-ml.github.io/scaling-book/gpus)"
# An f32 matmul's peak depends on the precision it is compiled at (jax.lax.Precision): at JAX's default a TPU
# multiplies f32 in one bfloat16 pass of the matrix unit and a GPU in TF32; at "highest", in 6 bfloat16 passes
# (TPU) or in FP32 on the CUDA cores (GPU). The lab compiles at the default: "f32" is that peak.
TPU_F32 = (
    "f32 at JAX's default precision: one bf16 pass of the MXU (jax.lax.Precision docs: DEFAULT 'performs float32 "
    "computations in bfloat16', HIGHEST 'in 6 bfloat16 passes'), so the bf16 peak; at 'highest' a sixth of it. "
    "Measured on one real TPU v5e (2026-12-05, an 8192³ matmul, JAX 0.10.2): bf16 166 TFLOP/s, f32 at the default "
    "147, 'high' 61, 'highest' 31 (84%, 75%, 93% and 94% of 197, 197, 65.7 and 32.8)"
)
HOST_LINK = f"{BOOK_TPUS}: 'PCIe bandwidth is typically around 1.5e10 bytes / second per chip'"
GPU_F32 = "JAX's default f32 matmul precision on a GPU is TF32 (jax.lax.Precision docs); 'highest' is FP32"


@dataclasses.dataclass(frozen=True)
class Chip:
    id: str
    name: str
    kind: str  # "tpu" or "gpu"
    peak_flops: dict  # dtype → dense FLOP/s; "f32" at JAX's default matmul precision, "f32_highest" at 'highest'
    hbm_bytes_per_s: float
    hbm_bytes: float
    sources: dict  # field → where the figure comes from
    # TPU interconnect
    ici_link_bytes_per_s: float | None = None
    torus: tuple[int, ...] = ()
    links_per_chip: int | None = None
    wrap_rule: str = ""  # "full" (only a full pod dimension wraps) or "x4" (multiples of 4 wrap)
    dcn_bytes_per_s: float | None = None
    # GPU interconnect
    nvlink_bytes_per_s: float | None = None
    node_size: int | None = None
    network_bytes_per_s: float | None = None
    # What a program may use of the HBM (TPUs: the runtime keeps the rest); None: all of ``hbm_bytes``
    hbm_usable_bytes: float | None = None
    # The chip's link to its host's memory (PCIe), one direction: what host offload's copies ride
    host_bytes_per_s: float | None = None

    @property
    def capacity(self) -> float:
        """The bytes a step must fit in: what the chip lets a program use where it is known, else its HBM."""
        return self.hbm_usable_bytes or self.hbm_bytes

    def capacity_text(self) -> str:
        """'16.9 GB usable of 16 GB HBM' (TPUs), '80 GB' (all of it)."""
        if self.hbm_usable_bytes:
            return f"{self.capacity / 1e9:,.1f} GB usable of {self.hbm_bytes / 1e9:,.0f} GB HBM"
        return f"{self.hbm_bytes / 1e9:,.0f} GB"

    def flops(self, dtype: str) -> tuple[float, str]:
        """(peak FLOP/s for ``dtype``, a note where it needs one). Mixed precision computes in bf16: its peak is
        bf16's. f32 is compiled at JAX's default matmul precision: its peak is that precision's (TPU_F32)."""
        value = self.peak_flops.get("bf16" if dtype == "mixed" else dtype)
        if dtype != "f32":
            return value, ""
        unit = "one bf16 pass of the matrix unit" if self.kind == "tpu" else "TF32 on the tensor cores"
        return value, (
            f"f32 at JAX's default matmul precision runs as {unit}: peak {value:.3g} FLOP/s on {self.name}; at "
            f"precision='highest' it would be {self.peak_flops['f32_highest']:.3g}"
        )

    def wraps(self, taken: int, dim: int) -> bool:
        """Whether a ring of ``taken`` chips along a torus dimension of ``dim`` has a wraparound."""
        if self.wrap_rule == "x4":
            return taken % 4 == 0
        return taken == dim >= 16  # only a full 16-chip dimension (a 16×16 pod or slice) has the wraparound

    def to_json(self) -> dict:
        out = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "peak_flops": self.peak_flops.get("bf16"),
            "peak_flops_by_dtype": dict(self.peak_flops),
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "hbm_bytes": self.hbm_bytes,
            "hbm_usable_bytes": self.hbm_usable_bytes,
            "capacity": self.capacity,
        }
        if self.kind == "tpu":
            out.update(
                {
                    "ici_link_bytes_per_s": self.ici_link_bytes_per_s,
                    "torus": list(self.torus),
                    "links_per_chip": self.links_per_chip,
                    "dcn_bytes_per_s": self.dcn_bytes_per_s,
                }
            )
        else:
            out.update(
                {
                    "nvlink_bytes_per_s": self.nvlink_bytes_per_s,
                    "node_size": self.node_size,
                    "network_bytes_per_s": self.network_bytes_per_s,
                }
            )
        out["sources"] = dict(self.sources)
        return out


CHIPS: dict[str, Chip] = {
    c.id: c
    for c in [
        Chip(
            "tpu-v5e",
            "TPU v5e",
            "tpu",
            # Google Cloud "TPU v5e": 197 TFLOPs bf16; book 1.97e14. f32: TPU_F32 (measured on a real v5e)
            peak_flops={"bf16": 1.97e14, "f32": 1.97e14, "f32_highest": 1.97e14 / 6},
            hbm_bytes_per_s=8.1e11,  # book 8.1e11 (Google Cloud lists 819 GB/s)
            hbm_bytes=16 * GB,  # Google Cloud "TPU v5e": 16 GB HBM2; book 16GB
            hbm_usable_bytes=16_909_336_064,  # 15.75 GiB: a real v5e's bytes_limit = the TPU compiler's "available HBM"
            ici_link_bytes_per_s=4.5e10,  # book: ICI BW/link one-way 4.5e10, bidi 9e10
            torus=(16, 16),  # book: pod 16x16 (2D torus, Google Cloud "TPU v5e")
            links_per_chip=4,  # Google Cloud "TPU v5e": ICI ports per chip 4
            wrap_rule="full",  # book: wraparound only along a full 16-chip axis
            dcn_bytes_per_s=3.125e9,  # book: DCN 3.125e9 bytes/s per TPU for v5e
            host_bytes_per_s=1.5e10,  # book: PCIe ~1.5e10 bytes/s per chip
            sources={
                "hbm_usable": USABLE_SOURCE
                + "; a real v5e's memory_stats bytes_limit 16,909,336,064 (tools/tpu_check.py, 2026-12-04)",
                "peak_flops": f"{BOOK_TPUS}; cloud.google.com/tpu/docs/v5e (197 TFLOPs bf16)",
                "peak_flops_f32": TPU_F32,
                "hbm": f"{BOOK_TPUS}; cloud.google.com/tpu/docs/v5e (16 GB, 819 GBps)",
                "ici": f"{BOOK_TPUS} (ICI 4.5e10 one-way / 9e10 bidi per link); 4 ICI ports per chip, 2D torus "
                "(cloud.google.com/tpu/docs/v5e)",
                "dcn": BOOK_TPUS + " (DCN 3.125e9 bytes/s per TPU v5e)",
                "host": HOST_LINK,
            },
        ),
        Chip(
            "tpu-v5p",
            "TPU v5p",
            "tpu",
            peak_flops={"bf16": 4.59e14, "f32": 4.59e14, "f32_highest": 4.59e14 / 6},  # book 4.59e14; TPU_F32
            hbm_bytes_per_s=2.8e12,  # book 2.8e12 (Google Cloud lists 2765 GBps)
            hbm_bytes=96 * GB,  # book 96GB (Google Cloud lists 95 GB)
            hbm_usable_bytes=95.74 * GIB,  # the TPU compiler's "available HBM (95.74G)" (libtpu 0.0.42.1)
            ici_link_bytes_per_s=9e10,  # book: one-way 9e10, bidi 1.8e11
            torus=(16, 20, 28),  # book: pod 16x20x28, 3D torus
            links_per_chip=6,  # book: "nearest 4 or 6 neighbors" — 6 in a 3D torus
            wrap_rule="x4",  # book: on v*p an axis that is a multiple of 4 wraps (full cubes)
            dcn_bytes_per_s=6.25e9,  # book: DCN 6.25e9 bytes/s per TPU
            host_bytes_per_s=1.5e10,  # book: PCIe ~1.5e10 bytes/s per chip
            sources={
                "hbm_usable": USABLE_SOURCE,
                "peak_flops": f"{BOOK_TPUS}; cloud.google.com/tpu/docs/v5p (459 TFLOPs bf16)",
                "peak_flops_f32": TPU_F32,
                "hbm": f"{BOOK_TPUS} (96GB, 2.8e12); cloud.google.com/tpu/docs/v5p (95 GB, 2765 GBps)",
                "ici": BOOK_TPUS + " (ICI 9e10 one-way / 1.8e11 bidi per link; 3D torus, 6 links)",
                "dcn": BOOK_TPUS + " (DCN 6.25e9 bytes/s per TPU)",
                "host": HOST_LINK,
            },
        ),
        Chip(
            "tpu-v6e",
            "TPU v6e (Trillium)",
            "tpu",
            peak_flops={"bf16": 9.2e14, "f32": 9.2e14, "f32_highest": 9.2e14 / 6},  # book 9.20e14; TPU_F32
            hbm_bytes_per_s=1.6e12,  # book 1.6e12
            hbm_bytes=32 * GB,  # book 32GB
            hbm_usable_bytes=31.25 * GIB,  # the TPU compiler's "available HBM (31.25G)" (libtpu 0.0.42.1)
            ici_link_bytes_per_s=9e10,  # book: one-way 9e10, bidi 1.8e11
            torus=(16, 16),  # book: pod 16x16
            links_per_chip=4,
            wrap_rule="full",
            dcn_bytes_per_s=12.5e9,  # book: 12.5e9 bytes/s per TPU v6e
            host_bytes_per_s=3.2e10,  # book: PCIe 32GB/s on Trillium
            sources={
                "hbm_usable": USABLE_SOURCE,
                "peak_flops": BOOK_TPUS + " (9.20e14 bf16)",
                "peak_flops_f32": TPU_F32,
                "hbm": BOOK_TPUS + " (32GB, 1.6e12)",
                "ici": BOOK_TPUS + " (ICI 9e10 one-way / 1.8e11 bidi per link; 16x16 2D torus)",
                "dcn": BOOK_TPUS + " (DCN 12.5e9 bytes/s per TPU v6e)",
                "host": HOST_LINK + " (its footnote: 'Trillium (TPU v6e) has 32GB/s, about 2x higher than v5')",
            },
        ),
        Chip(
            "h100",
            "NVIDIA H100 SXM",
            "gpu",
            # NVIDIA H100 datasheet (SXM): BF16 Tensor Core 1,979 TFLOPS *with sparsity* → 989.4 dense;
            # FP32 (CUDA cores) 67 TFLOPS. Book: 9.9e14 bf16.
            # TF32 Tensor Core 989 TFLOPS with sparsity → 494.7 dense: JAX's default f32 matmul precision on a GPU
            peak_flops={"bf16": 989.4e12, "f32": 494.7e12, "f32_highest": 66.9e12},
            hbm_bytes_per_s=3.35e12,  # datasheet: 3.35 TB/s
            hbm_bytes=80 * GB,  # datasheet: 80 GB
            nvlink_bytes_per_s=450 * GB,  # datasheet: NVLink 900 GB/s (both directions); book: 450 GB/s egress
            node_size=8,  # HGX/DGX H100: 8 GPUs on NVSwitches
            network_bytes_per_s=400e9 / 8,  # DGX H100: one 400 Gb/s ConnectX-7 per GPU = 50 GB/s
            sources={
                "peak_flops": "NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 1,979 TFLOPS with sparsity "
                "(989.4 dense), FP32 67 TFLOPS; " + BOOK_GPUS + " (9.9e14)",
                "peak_flops_f32": "the same datasheet: TF32 Tensor Core 989 TFLOPS with sparsity (494.7 dense), FP32 "
                "67 TFLOPS; " + GPU_F32,
                "hbm": "NVIDIA H100 datasheet (SXM): 80 GB, 3.35 TB/s",
                "nvlink": "NVIDIA H100 datasheet: NVLink 900 GB/s; "
                + BOOK_GPUS
                + " (18 links × 25 GB/s = 450 GB/s per direction, 8-GPU node)",
                "network": BOOK_GPUS + " (8 × 400 Gbps CX7 NICs per node, one per GPU)",
            },
        ),
        Chip(
            "h200",
            "NVIDIA H200 SXM",
            "gpu",
            peak_flops={"bf16": 989.4e12, "f32": 494.7e12, "f32_highest": 66.9e12},  # GH100 as H100 (book 9.9e14)
            hbm_bytes_per_s=4.8e12,  # NVIDIA H200 datasheet: 4.8 TB/s
            hbm_bytes=141 * GB,  # NVIDIA H200 datasheet: 141 GB HBM3e
            nvlink_bytes_per_s=450 * GB,  # datasheet: NVLink 900 GB/s (both directions)
            node_size=8,
            network_bytes_per_s=400e9 / 8,  # HGX H200 as DGX H100: 400 Gb/s per GPU
            sources={
                "peak_flops": "NVIDIA H200 datasheet (SXM): BF16 1,979 TFLOPS with sparsity (989 dense), "
                "FP32 67 TFLOPS; " + BOOK_GPUS + " (9.9e14)",
                "peak_flops_f32": "the same datasheet: TF32 Tensor Core 989 TFLOPS with sparsity (494.7 dense), FP32 "
                "67 TFLOPS; " + GPU_F32,
                "hbm": "NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s; " + BOOK_GPUS,
                "nvlink": "NVIDIA H200 datasheet: NVLink 900 GB/s (450 per direction)",
                "network": BOOK_GPUS + " (400 Gbps NIC per GPU, as DGX H100)",
            },
        ),
        Chip(
            "b200",
            "NVIDIA B200 (HGX, 1000 W)",
            "gpu",
            # NVIDIA HGX B200 (per GPU): FP16/BF16 4.5 PFLOPS with sparsity → 2.25 dense; FP32 80 TFLOPS
            # (NVIDIA Blackwell architecture page, quoted in the book's quiz). Book: 2.3e15 bf16.
            # TF32 Tensor Core 2.2 PFLOPS with sparsity → 1.1 dense (NVIDIA HGX B200 spec, per GPU)
            peak_flops={"bf16": 2.25e15, "f32": 1.1e15, "f32_highest": 80e12},
            hbm_bytes_per_s=8.0e12,  # book: 8.0e12 (HGX B200: 8 TB/s per GPU)
            hbm_bytes=180 * GB,  # NVIDIA DGX B200 user guide: 8 GPUs, 1,440 GB total (192 GB physical per book)
            nvlink_bytes_per_s=900 * GB,  # NVLink 5: 1.8 TB/s both directions; book: 900 GB/s per direction
            node_size=8,
            network_bytes_per_s=400e9 / 8,  # DGX B200 user guide: 8 × ConnectX-7, up to 400 Gbps each
            sources={
                "peak_flops": "NVIDIA HGX B200 spec (1000 W): BF16 4.5 PFLOPS with sparsity (2.25 dense), "
                "FP32 80 TFLOPS; " + BOOK_GPUS + " (2.3e15)",
                "peak_flops_f32": "NVIDIA HGX B200 spec: TF32 Tensor Core 2.2 PFLOPS with sparsity (1.1 dense), FP32 "
                "80 TFLOPS; " + GPU_F32,
                "hbm": BOOK_GPUS + " (8.0e12 B/s); NVIDIA DGX B200 user guide: 1,440 GB total for 8 GPUs",
                "nvlink": BOOK_GPUS + " (NVLink 5: 900 GB/s per direction, 18 links); 1.8 TB/s both ways",
                "network": "NVIDIA DGX B200 user guide: 8 × ConnectX-7 single-port, up to 400 Gbps each",
            },
        ),
    ]
}


def chip(chip_id: str) -> Chip:
    """The chip called ``chip_id`` (e.g. ``h100``, ``tpu-v5e``) — a ConfigError naming the choices otherwise."""
    key = str(chip_id).strip().lower()
    if key not in CHIPS:
        raise ConfigError(f"unknown chip {chip_id!r}: choose one of {', '.join(CHIPS)}", "chip")
    return CHIPS[key]


# --- which link each mesh axis runs over ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Link:
    """The link a mesh axis's ring collectives run over, and the bytes/s each device can push on it."""

    name: str  # "ICI", "NVLink", "network" (GPU NICs), "DCN" (between TPU slices), "none"
    bytes_per_s: float
    why: str
    both_ways: bool = False  # a TPU ring that closes (wraparound): sends go both ways, half the hops
    hops: int | None = None  # TPU: links of an all-gather's longest path (Σ per torus dimension); None: n − 1 or n/2

    def to_json(self) -> dict:
        return {
            "link": self.name,
            "bytes_per_s": self.bytes_per_s,
            "why": self.why,
            "hops": self.hops,
            "latency_s": LATENCY[self.name][0] if self.name in LATENCY else 0.0,
        }

    def latency_s(self, op: str, n: int) -> float:
        """The α of an α–β model: what one collective over ``n`` devices costs before its bytes count. On a
        GPU link one collective's measured start-up; on TPU ICI a hop's latency times the hops of its ring
        (n − 1 one way, n/2 when the ring closes and sends go both ways; an all-reduce is a reduce-scatter then
        an all-gather: twice; a permute one hop)."""
        if self.name not in LATENCY or n <= 1:
            return 0.0
        alpha = LATENCY[self.name][0]
        if self.name != "ICI":
            return alpha
        if op == "collective-permute":
            return alpha
        hops = self.hops if self.hops is not None else -(-n // 2) if self.both_ways else n - 1
        return alpha * hops * (2 if op == "all-reduce" else 1)


# The α of an α–β model (time = α + bytes / bandwidth), per link kind, each with where it was measured.
LATENCY = {
    "NVLink": (
        3.5e-6,
        "NVIDIA/nccl issue 1984: a 1 KiB all-reduce on 4 NVLink-connected H800s, 3.5 µs without "
        "CUDA graphs (0.5 µs with them); issue 1259: about 6 µs on 2 H100s with NVLink SHARP",
    ),
    "network": (
        25e-6,
        "NVIDIA/nccl issue 1453: NCCL's tuner prints 25.2 µs for a 128-byte all-reduce across "
        "the nodes of an H100 cluster",
    ),
    "DCN": (
        25e-6,
        "as a GPU cluster's network (NVIDIA/nccl issue 1453: 25.2 µs for 128 bytes); no TPU DCN figure is published",
    ),
    "ICI": (
        1e-6,
        "per hop: the scaling book, sharding.md, 'latency-bound AllGather' — a 4-chip ring with "
        "wraparound gathers 64 bytes per chip in 2 hops, 'roughly 2us'",
    ),
}


def axis_links(chip: Chip, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> dict[str, Link]:
    """Mesh axis → its link on ``chip``. Devices are numbered with the last mesh axis innermost.

    GPUs: a group whose members all sit in one node (8 GPUs) rings over NVLink. A group that spans
    nodes is limited by the network: each node's egress is its GPUs' NICs together, and a
    hierarchical collective (NCCL: one ring per NIC) sends each byte across the network once per
    node, so a group with g members per node gets g × one NIC (scaling book, gpus.md, "Cross-node
    collectives": an AllGather over nodes takes bytes / node egress, 400 GB/s for 8 × H100).

    TPUs: each axis takes torus dimensions of the pod (one, or several when it is longer than a
    dimension — scaling book, sharding.md: over several axes the bandwidth is × n_axes); what does
    not fit in one pod crosses slices over the DCN."""
    if chip.kind == "gpu":
        return {name: group_link(chip, mesh_shape, axis_names, (name,)) for name in axis_names}
    links: dict[str, Link] = {}
    free = sorted(chip.torus)
    for name, size in reversed(list(zip(axis_names, mesh_shape))):
        if size == 1:
            links[name] = Link("none", float("inf"), "size 1: no communication")
            continue
        remaining, parts = size, []
        while remaining > 1 and free:
            fits = [d for d in free if d >= remaining]
            dim = fits[0] if fits else free[-1]
            take = max(t for t in range(1, min(remaining, dim) + 1) if remaining % t == 0)
            if take == 1:
                break
            free.remove(dim)
            parts.append((take, dim))
            remaining //= take
        if remaining > 1:
            links[name] = Link(
                "DCN",
                chip.dcn_bytes_per_s,
                f"does not fit in the {'x'.join(map(str, chip.torus))} pod's free torus "
                "dimensions: crosses slices over the data-centre network",
            )
            continue
        bandwidth = sum(chip.ici_link_bytes_per_s * (2 if chip.wraps(take, dim) else 1) for take, dim in parts)
        described = "; ".join(
            f"{take} chips along a {dim}-chip torus dimension "
            f"({'wraparound: both directions' if chip.wraps(take, dim) else 'no wraparound: one direction'})"
            for take, dim in parts
        )
        hops = sum(-(-take // 2) if chip.wraps(take, dim) else take - 1 for take, dim in parts)  # the book's Σ|Xᵢ|/2
        closed = all(chip.wraps(take, dim) for take, dim in parts)
        links[name] = Link("ICI", bandwidth, described, both_ways=closed, hops=hops)
    return {name: links[name] for name in axis_names}


def _in_node(chip: Chip, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]) -> dict[str, int]:
    """GPUs: axis → how many of its coordinates lie inside one node (the axes after it are inner)."""
    counts, inner = {}, 1
    for name, size in reversed(list(zip(axis_names, mesh_shape))):
        counts[name] = max(1, min(size, chip.node_size // inner)) if inner < chip.node_size else 1
        inner *= size
    return counts


def group_link(chip: Chip, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...], axes: tuple[str, ...]) -> Link:
    """The link of a collective whose groups span ``axes`` (see :func:`axis_links`). On TPUs the
    axes' torus bandwidths add up (n_axes ×) unless one of them crosses the DCN."""
    sizes = dict(zip(axis_names, mesh_shape))
    axes = tuple(a for a in axes if sizes.get(a, 1) > 1)
    if not axes:
        return Link("none", float("inf"), "no communication between devices")
    if chip.kind == "gpu":
        in_node = _in_node(chip, mesh_shape, axis_names)
        members = 1
        for a in axes:
            members *= sizes[a]
        per_node = 1
        for a in axes:
            per_node *= in_node[a]
        if per_node >= members:
            return Link(
                "NVLink", chip.nvlink_bytes_per_s, f"all {members} GPUs of a group sit in one {chip.node_size}-GPU node"
            )
        return Link(
            "network",
            per_node * chip.network_bytes_per_s,
            f"a group of {members} GPUs spans {members // per_node} nodes with {per_node} per node: "
            f"{per_node} × one GPU's 400 Gb/s NIC",
        )
    links = axis_links(chip, mesh_shape, axis_names)
    used = [links[a] for a in axes]
    if len(used) == 1:
        return used[0]
    slowest = min(used, key=lambda link: link.bytes_per_s)
    if slowest.name == "DCN":
        return Link("DCN", slowest.bytes_per_s, "one of its axes crosses slices: " + slowest.why)
    return Link("ICI", sum(link.bytes_per_s for link in used), f"{len(used)} torus axes together")


__all__ = ["CHIPS", "Chip", "LATENCY", "Link", "axis_links", "chip", "group_link"]
