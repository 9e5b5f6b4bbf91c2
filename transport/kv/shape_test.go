package kv

import "testing"

func TestMismatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		p, c Shape
		want string
	}{
		{"both unknown", Shape{}, Shape{}, ""},
		{"same", Shape{16, "auto", 2}, Shape{16, "auto", 2}, ""},
		{"one side unknown", Shape{BlockSize: 32, CacheDType: "fp8"}, Shape{TP: 4}, ""},
		{"cache dtype", Shape{16, "fp8", 1}, Shape{16, "auto", 1}, "cache dtype fp8 ≠ auto"},
		{"block size", Shape{BlockSize: 32}, Shape{BlockSize: 16}, "block size 32 ≠ 16"},
		{"tensor parallel", Shape{TP: 2}, Shape{TP: 1}, "tensor parallel size 2 ≠ 1"},
		{"dtype named first", Shape{32, "fp8", 2}, Shape{16, "auto", 1}, "cache dtype fp8 ≠ auto"},
	} {
		if got := Mismatch(tc.p, tc.c); got != tc.want {
			t.Errorf("%s: Mismatch = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDescriptorTP(t *testing.T) {
	for raw, want := range map[string]int{
		`{"do_remote_prefill":true,"remote_engine_id":"e","tp_size":4}`: 4,
		`{"do_remote_prefill":true,"remote_engine_id":"e"}`:             0,
		`{"tp_size":"4"}`: 0,
		`{"tp_size":0}`:   0,
		`not json`:        0,
	} {
		if got := DescriptorTP([]byte(raw)); got != want {
			t.Errorf("DescriptorTP(%s) = %d, want %d", raw, got, want)
		}
	}
}
