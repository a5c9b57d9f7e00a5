"""Error-bounded lossy recompression (``zopt recompress --lossy``, ``zopt verify``).

- ``spec``: ``VAR=abs:E[:TAIL] | rel:R | keepbits:K | info:L[:chunk] | plan:PATH`` → ``LossySpec``;
- ``bounds``: an absolute bound → ``scale_offset`` + ``cast_value`` to integer codes with a proof
  of the bound and a per-chunk check;
- ``tails``: the codecs storing those codes (pcodec, Lorenzo + pcodec, blosc, packbits…), chosen
  by trial on sampled chunks among those the ``readers`` read;
- ``relative``: ``rel:R``, a point-wise relative bound proven by bitrounding;
- ``bitinfo``: bitwise real information content (Klöwer et al. 2021) and keepbits;
- ``prepare``: the analysis graph and the hook ``recompress`` calls;
- ``check``: one region of a lossy array against its recorded bound (``zopt.readback.verify`` calls it);
- ``verify``: the old name of ``zopt.readback.verify`` (kept for existing imports).
"""

from zopt.lossy.bounds import AbsChain, LossyBoundError, design_abs
from zopt.lossy.prepare import bitround, keepbits_plan, prepare_lossy
from zopt.lossy.spec import LossySpec, parse_lossy

__all__ = ["AbsChain", "LossyBoundError", "LossySpec", "bitround", "design_abs", "keepbits_plan", "parse_lossy",
           "prepare_lossy"]
