"""The lab: the benchmark suite, A/B runs, probes and ncu scripts. Not part of the fp4ops package;
run from the repository root (benchmarks/README.md)."""
