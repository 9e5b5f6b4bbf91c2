// Package harness owns the benchmark's processes and what is read from them: the simulated
// fleet (`narwhal sim fleet`), the router (`narwhal serve` with a generated configuration),
// the load generator (this binary re-executed in loadgen mode), each in its own process group
// and killed with it; /proc CPU and RSS sampling; the router's admin endpoints (readiness,
// Prometheus counters, pprof profiles); and the file-descriptor limit. A Rig is one fleet, one
// router and one generator wired together; scenarios drive rigs.
package harness
