"""Tools built on the service layer: the demo, the simulator, the benchmark workload and the benchmarks."""
