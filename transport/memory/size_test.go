package memory

import (
	"math"
	"os"
	"strings"
	"testing"
)

// server.max_buffered_bytes unset (Size) is half the memory limit: the cgroup's (v2, the smallest on
// the way up; v1) or GOMEMLIMIT, the smaller; else a quarter of the host's memory.
func TestBufferBudgetDerivedFromTheMemoryLimit(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
	}
	meminfo := "MemTotal:       16384000 kB\nMemFree: 1 kB\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		gomem int64
		want  int64
		from  string
	}{
		{"cgroup v2", map[string]string{"/proc/self/cgroup": "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup/kubepods/pod1/c1/memory.max": "max\n",
			"/sys/fs/cgroup/kubepods/pod1/memory.max": "2147483648\n", "/proc/meminfo": meminfo}, math.MaxInt64, 1 << 30, "cgroup"},
		{"cgroup v1", map[string]string{"/proc/self/cgroup": "4:memory:/docker/abc\n3:cpu:/x\n",
			"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "1073741824\n"}, math.MaxInt64, 512 << 20, "cgroup"},
		{"cgroup v1 without a limit", map[string]string{"/proc/self/cgroup": "4:memory:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n", "/proc/meminfo": meminfo}, math.MaxInt64, 16384000 << 10 / 4, "host"},
		{"GOMEMLIMIT below the cgroup's", map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "4294967296\n"}, 1 << 30, 512 << 20, "GOMEMLIMIT"},
		{"a tiny limit", map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "100000000\n"}, math.MaxInt64, minDerived, "cgroup"},
		{"nothing known", map[string]string{}, math.MaxInt64, 1 << 30, "1 GiB"},
	} {
		got, from := derivedBudget(files(tc.files), tc.gomem)
		if got != tc.want || !strings.Contains(from, tc.from) {
			t.Errorf("%s: %d (%s), want %d (%s)", tc.name, got, from, tc.want, tc.from)
		}
	}
}
