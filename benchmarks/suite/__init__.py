"""The benchmark suite: `python -m benchmarks.suite --help` from the repository root.

harness (timing, ceilings, banner), cases (each op's rows and output checks), baselines and peers
(what fp4ops is compared with), runner (one input at a time, JSON after each), targets and report
(docs/performance.md's targets, Markdown, plots, the README's headline table), cli.
"""

from .cli import main

__all__ = ["main"]
