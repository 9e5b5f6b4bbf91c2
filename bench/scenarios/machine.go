package scenarios

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

func cpus() string { return fmt.Sprintf("%d CPUs", runtime.NumCPU()) }

// LoadAverage is the machine's 1/5/15-minute load average: other work on the machine
// (neighbours' builds and tests) shows here and in every latency figure.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
