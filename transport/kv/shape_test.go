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
