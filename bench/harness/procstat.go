package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is a process's resource use at one instant.
type Usage struct {
	// CPU is utime + stime from /proc/<pid>/stat (clock-tick resolution).
	CPU time.Duration
	// RSSKiB is VmRSS from /proc/<pid>/status.
	RSSKiB  int64
	Threads int
}

// ClockTicks is the kernel's USER_HZ (`getconf CLK_TCK`, usually 100).
var ClockTicks = sync.OnceValue(func() int {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

// ReadUsage samples pid's CPU time, RSS and thread count.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, err
	}
	// The command name may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return Usage{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15, num_threads 20.
	if len(f) < 18 {
		return Usage{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	threads, _ := strconv.Atoi(f[17])
	if err1 != nil || err2 != nil {
		return Usage{}, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	u := Usage{CPU: time.Duration(utime+stime) * time.Second / time.Duration(ClockTicks()), Threads: threads}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			u.RSSKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return u, nil
}
