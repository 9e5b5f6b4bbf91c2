package memory

import (
	"fmt"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// minDerived is the smallest budget Size derives: the smallest server.max_buffered_bytes allows.
const minDerived = 64 << 20

// Size is the budget server.max_buffered_bytes asks for (configured), and where its value came
// from: configured itself when it is set; unset (0), half of the memory limit the process runs
// under — the smaller of its cgroup's memory limit and GOMEMLIMIT — and, with neither, a quarter
// of the host's memory; never less than 64 MiB. The process calls it once, at start.
func Size(configured int64) (int64, string) {
	if configured > 0 {
		return configured, "server.max_buffered_bytes"
	}
	return derivedBudget(os.ReadFile, debug.SetMemoryLimit(-1))
}

// derivedBudget is half the memory limit (cgroup or GOMEMLIMIT, the smaller), else a quarter
// of the host's memory, never below minDerived. readFile reads /proc and /sys (a test gives
// its own); goMemLimit is the runtime's limit (math.MaxInt64 when GOMEMLIMIT is not set).
func derivedBudget(readFile func(string) ([]byte, error), goMemLimit int64) (int64, string) {
	limit, source := cgroupLimit(readFile)
	if goMemLimit > 0 && goMemLimit < math.MaxInt64 && (limit == 0 || goMemLimit < limit) {
		limit, source = goMemLimit, "GOMEMLIMIT"
	}
	if limit > 0 {
		return max(limit/2, minDerived), "half of " + source + " (" + strconv.FormatInt(limit, 10) + " bytes)"
	}
	if total := memTotal(readFile); total > 0 {
		return max(total/4, minDerived), "a quarter of the host's memory (" + strconv.FormatInt(total, 10) + " bytes)"
	}
	return 1 << 30, "1 GiB (no memory limit or host memory found)"
}

// cgroupLimit is the memory limit of this process's cgroup (v2: the smallest memory.max on the
// way to the root; v1: memory.limit_in_bytes), 0 when there is none.
func cgroupLimit(readFile func(string) ([]byte, error)) (int64, string) {
	b, err := readFile("/proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	var best int64
	take := func(file string) {
		v, err := readFile(file)
		if err != nil {
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's "no limit" (a page-rounded MaxInt64)
			return
		}
		if best == 0 || n < best {
			best = n
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2
			for dir := path.Clean(parts[2]); ; dir = path.Dir(dir) {
				take(path.Join("/sys/fs/cgroup", dir, "memory.max"))
				if dir == "/" {
					break
				}
			}
		case strings.Contains(","+parts[1]+",", ",memory,"): // cgroup v1
			take(path.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
			take("/sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	if best == 0 {
		return 0, ""
	}
	return best, "the cgroup memory limit"
}

// memTotal is the host's memory from /proc/meminfo, 0 when unknown.
func memTotal(readFile func(string) ([]byte, error)) int64 {
	b, err := readFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
