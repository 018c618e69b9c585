"""`python -m benchmarks.suite`: the benchmark suite's command line (see benchmarks.suite.cli)."""

from .cli import main

main()
