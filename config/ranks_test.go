package config

import (
	"strings"
	"testing"
)

func TestDataParallelSizeIsChecked(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {1, true}, {8, true}, {MaxDataParallelSize, true}, {-1, false}, {MaxDataParallelSize + 1, false}} {
		err := CheckEngine(Engine{Name: "d0", URL: "http://10.0.0.1:8000", Role: RoleDecode, DataParallelSize: tc.n}, nil)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "data_parallel_size")) {
			t.Errorf("data_parallel_size %d: %v", tc.n, err)
		}
	}
}
