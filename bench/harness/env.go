package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Env is what every scenario needs from the run: where the binaries are, where its files go.
type Env struct {
	// Narwhal is the router binary (bin/narwhal): it also runs the simulated fleet.
	Narwhal string
	// Baseline is a second router binary (an older build) that the overhead scenario runs as
	// its own arm beside Narwhal; "" runs none.
	Baseline string
	// BaselineTraced says the baseline is Narwhal itself with tracing on (bench -traced): the
	// overhead scenario then measures what tracing costs.
	BaselineTraced bool
	// Self is this binary, re-executed as `<self> loadgen` for the load generator.
	Self string
	// Dir is the scenario's output directory (logs, configuration, profiles).
	Dir string
	// Profile asks scenarios to capture router profiles in extra windows.
	Profile bool
	// Quick shortens every window (smoke runs; figures are then rough).
	Quick bool
	// RouterEnv is added to the router's environment (experiments: GOGC=50, GOMAXPROCS=1).
	RouterEnv []string
	// Trace is the Mooncake trace the fleet and goodput scenarios replay; they skip when the
	// file is absent.
	Trace string
	// SLOTTFT and SLOTPOT are the goodput scenario's latency objectives (time to first
	// token; time per output token after the first); 0 derives each from the simulator's
	// calibration (bench/README.md, "Goodput").
	SLOTTFT, SLOTPOT time.Duration
	// Rates are the goodput scenario's offered rates in requests/s; empty: its default sweep.
	Rates []float64
	// Policies are the goodput scenario's arms by key (auto, pd, …); empty: all of them.
	Policies []string
	// Workloads are the goodput scenario's workloads by key (trace, no_sharing, overflow);
	// empty: trace and no_sharing.
	Workloads []string
}

// Logf prints progress to stderr, stamped.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Path is a file in the scenario's directory.
func (e Env) Path(name string) string { return filepath.Join(e.Dir, name) }

// Scale shortens d in quick runs.
func (e Env) Scale(d time.Duration) time.Duration {
	if e.Quick {
		return max(d/4, 250*time.Millisecond)
	}
	return d
}
