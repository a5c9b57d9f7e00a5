"""The recompress job, one module per step of its data path (``docs/architecture.md``):

- ``api``: ``recompress`` and ``recompress_in_place``, parse → work → check → target → graph → run → report;
- ``chains``: the target codec chain, parsed and split; decisions attached to opened arrays;
- ``work``: the pure plan of work per array, built and checked before anything is written;
- ``targets``: a local directory or a store; creating, measuring, publishing, discarding;
- ``dask_graph``: the Dask graph of the work and its run;
- ``tasks``: the worker functions;
- ``reports``: ``ArrayReport`` and ``RecompressReport``.

``zopt.engine`` re-exports the public names.
"""

from zopt.recompress.api import recompress, recompress_in_place
from zopt.recompress.reports import ArrayReport, RecompressReport

__all__ = ["ArrayReport", "RecompressReport", "recompress", "recompress_in_place"]
