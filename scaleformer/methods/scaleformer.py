"""ScaleFormer (paper section 3): boundary tokens of overlapping chunks, fused with directional
context (eqs. 2-5), plus optional middle tokens, concatenated for the decoder (eq. 6).

Per chunk the decoder gets ``L'_i (k) | M_i (<= m) | R'_i (k)``: left/right are the first/last k
positions of the encoded chunk (eq. 1: of H_i, after any query prefix; never pads). With raw slices
(``chunk_special_tokens=false``) the first chunk starts with the document's ``<s>`` (BART) and the
last ends with its ``</s>``, so L_1 / R_C hold them: the paper takes the first/last k positions of
every chunk. Middle tokens come from the interior (not boundary slots, not special tokens), in
document order. A chunk shorter than 2k (only possible for a document that is a single short chunk)
yields each of its tokens once. Only these positions are kept from each encoder micro-batch.

Middle tokens (section 3.3, "random sampling"): in training a fresh uniform draw per chunk and step
(torch's RNG); at evaluation a reproducible draw, the top-m of a hash of (``middle_seed``, the
chunk's index in its document, the document position), so the same config gives the same tokens
whatever the batch, and overlapping chunks draw independently, as in training (ours: the paper does
not say how evaluation samples). ``uniform`` (ours) spaces them evenly. ``query`` (ours, for data with
a query) takes the m interior tokens the query attends to most in the last layer, in training and
evaluation alike (:mod:`scaleformer.ops.query_middle`).

Cost (ours, no effect on the numbers beyond float rounding): with ``kept_only_last_layer`` (default)
the encoder's last layer computes queries, attention output, FFN and final norm only at the kept
positions, keys and values still from the whole chunk (:mod:`scaleformer.ops.kept_layer`); in training
with dropout the full layer runs (see there why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from scaleformer.errors import check
from scaleformer.methods.chunked import ChunkedConfig, ChunkedMethod
from scaleformer.ops.chunking import ChunkLayout, PickFn
from scaleformer.ops.fusion import span_cumulation
from scaleformer.ops.kept_layer import encode_at
from scaleformer.ops.query_middle import query_middle_picks

_MASK32 = 0xFFFFFFFF
QUERY_STRATEGIES = ("query", "query_lift")  # middles chosen by the query (need one per document)


@dataclass
class ScaleFormerConfig(ChunkedConfig):
    name: str = "scaleformer"
    # k: boundary tokens taken from each end of every chunk.
    boundary_tokens: int = 1
    # Weight of the local boundary against its directional context (eqs. 4-5); 1 = no fusion.
    alpha: float = 0.5
    # m: middle tokens per chunk (all interior tokens when the interior has fewer).
    middle_tokens: int = 0
    # "random" (the paper; fresh each training step, seeded hash at evaluation), "uniform", "query": the
    # interior tokens the query attends to most in the last layer (scaleformer.ops.query_middle), or
    # "query_lift": the same against each position's attention from the whole chunk (its positional prior).
    middle_strategy: str = "random"
    # Seed of the evaluation-time random selection (same seed + config = same tokens).
    middle_seed: int = 0
    # The last encoder layer evaluated at the kept positions only (keys/values from the whole chunk):
    # the same states up to float rounding, faster. false = the full encoder pass.
    kept_only_last_layer: bool = True

    EVAL_KEYS: ClassVar[tuple[str, ...]] = ("middle_seed",)
    RUNTIME_KEYS: ClassVar[tuple[str, ...]] = (*ChunkedConfig.RUNTIME_KEYS, "kept_only_last_layer")

    def __post_init__(self) -> None:
        super().__post_init__()
        k = self.boundary_tokens
        check(k >= 1, "method.boundary_tokens", k, "must be >= 1")
        check(2 * k <= self.chunk_size, "method.boundary_tokens", k,
              f"2 * boundary_tokens must be <= method.chunk_size ({self.chunk_size})")
        check(self.middle_tokens >= 0, "method.middle_tokens", self.middle_tokens, "must be >= 0")
        check(0.0 <= self.alpha <= 1.0, "method.alpha", self.alpha, "must be in [0, 1]")
        check(self.middle_strategy in ("random", "uniform", *QUERY_STRATEGIES), "method.middle_strategy",
              self.middle_strategy, "must be 'random', 'uniform', 'query' (the query's most-attended interior "
              "tokens) or 'query_lift' (the same against each position's prior attention)")


class ScaleFormer(ChunkedMethod):
    name = "scaleformer"
    small_settings = {"chunk_size": 48, "overlap": 12, "middle_tokens": 8}
    Config = ScaleFormerConfig
    cfg: ScaleFormerConfig

    def select(self, layout: ChunkLayout, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``[R, 2k + m]`` laid out as left k | middle m | right k, and which are emitted."""
        k, m = self.cfg.boundary_tokens, self.cfg.middle_tokens
        seg = layout.seg_len[:, None]  # [R, 1]
        j = torch.arange(k)[None, :]  # [1, k]
        k_left = seg.clamp(max=k)  # [R, 1] left slots that are distinct tokens
        left = torch.minimum(j, seg - 1)  # [R, k] segment positions, clamped into short chunks
        right_raw = seg - k + j  # [R, k]
        right = right_raw.clamp(min=0)
        # Short chunks: right slots already covered by the left ones are not emitted again (but still
        # hold real tokens, so the fusion never sees a pad). Unpicked middle slots point at position 0.
        left_ok, right_ok = j < k_left, right_raw >= k_left  # [R, k]
        lo = layout.special_lo.clamp(min=k)[:, None]  # [R, 1] interior: not boundary, not special
        hi = seg - layout.special_hi.clamp(min=k)[:, None]
        n_mid = (hi - lo).clamp(min=0)  # [R, 1] interior tokens
        mid, mid_ok = self._middle(layout, lo, n_mid, m, training)  # [R, m'] segment positions
        pos = torch.cat([left, mid, right], 1) + layout.prefix_len[:, None]  # [R, 2k + m'] row positions
        valid = torch.cat([left_ok, mid_ok, right_ok], 1)
        return pos, valid

    def _middle(self, layout: ChunkLayout, lo: torch.Tensor, n_mid: torch.Tensor, m: int,
                training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """m middle positions per chunk (segment coordinates, ascending) among ``n_mid`` from ``lo``."""
        rows = lo.shape[0]
        width = int(n_mid.max()) if rows else 0  # candidate slots per chunk
        m_eff = min(m, width)
        take = n_mid.clamp(max=m_eff)  # [R, 1] middle tokens of each chunk
        j = torch.arange(m_eff)[None, :]  # [1, m']
        ok = j < take  # [R, m']
        if m_eff == 0:
            return torch.zeros(rows, 0, dtype=torch.long), ok
        if self.cfg.middle_strategy == "uniform":
            offset = torch.div((2 * j + 1) * n_mid, 2 * take.clamp(min=1), rounding_mode="floor")
        else:
            c = torch.arange(width)[None, :]  # [1, W] candidate offsets
            if training:  # a fresh draw every step (torch's RNG, seeded by the trainer)
                score = torch.randint(0, _MASK32 + 1, (rows, width))
            else:  # reproducible, whatever the batch; independent across chunks (their index is hashed)
                chunk_seed = hash32(layout.table.index, self.cfg.middle_seed)[:, None]  # [R, 1]
                score = hash32(layout.doc_position(lo + c), chunk_seed)  # [R, W]
            key = (score * width + c).masked_fill(c >= n_mid, -1)  # [R, W] unique keys, -1 = not a candidate
            offset = key.topk(m_eff, dim=1).indices.sort(dim=1).values  # [R, m'] ascending = document order
        return torch.where(ok, lo + offset, 0), ok

    def pick_fn(self, training: bool) -> PickFn | None:
        if self.cfg.middle_strategy in QUERY_STRATEGIES and self.cfg.middle_tokens > 0:
            return query_middle_picks(self.cfg.boundary_tokens, lift=self.cfg.middle_strategy == "query_lift")
        return encode_at if self.cfg.kept_only_last_layer else None

    def check_prefix(self, n_tokens: int, where: str = "") -> None:
        super().check_prefix(n_tokens, where)
        check(self.cfg.middle_strategy not in QUERY_STRATEGIES or n_tokens > 0 or self.cfg.middle_tokens == 0,
              "method.middle_strategy", self.cfg.middle_strategy, "needs a query per document (data.prefix_field or "
              "data.query_split); this data has none")

    def combined_columns(self, width: int) -> torch.Tensor:
        """The k left and k right boundary slots (middles pass through unchanged)."""
        k = self.cfg.boundary_tokens
        return torch.cat([torch.arange(k), torch.arange(width - k, width)])

    def combine(self, kept: torch.Tensor, layout: ChunkLayout) -> torch.Tensor:
        """Fuse left/right boundaries ``[R, 2k, d]`` across each document's chunks (eqs. 2-5)."""
        k = self.cfg.boundary_tokens
        t = layout.table
        dev, d = kept.device, kept.shape[-1]
        batch, c_max = t.counts.shape[0], int(t.counts.max())
        slot = (t.doc * c_max + t.index).to(dev)  # [R] place of each chunk in [batch, C]
        left, right = kept[:, :k], kept[:, k:]  # [R, k, d]

        def padded(x: torch.Tensor) -> torch.Tensor:  # [R, k, d] -> [batch, C, k, d]
            return x.new_zeros(batch * c_max, k, d).index_copy(0, slot, x).view(batch, c_max, k, d)

        chunk_mask = (torch.arange(c_max)[None, :] < t.counts[:, None]).to(dev)  # [batch, C]
        lf, rf = span_cumulation(padded(left), padded(right), self.cfg.alpha, chunk_mask)
        lf = lf.reshape(batch * c_max, k, d).index_select(0, slot)  # [R, k, d]
        rf = rf.reshape(batch * c_max, k, d).index_select(0, slot)
        return torch.cat([lf, rf], 1)  # [R, 2k, d]


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32), without int64 overflow."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _MASK32


def hash32(x: torch.Tensor, seed: int | torch.Tensor) -> torch.Tensor:
    """Integer hash of (seed, x) in [0, 2**32), elementwise (``seed`` broadcasts): same on any device."""
    s = seed & _MASK32
    s = ((s ^ (s >> 16)) * 0x45D9F3B) & _MASK32
    x = (x.long() & _MASK32) ^ s
    x = _mul32(x ^ (x >> 16), 0x7FEB352D)
    x = _mul32(x ^ (x >> 15), 0x846CA68B)
    return x ^ (x >> 16)
