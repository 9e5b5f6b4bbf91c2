package kvevents

import "testing"

func TestRankEndpointOffsetsAsVLLMDoes(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		rank     int
		want     string
	}{
		{"tcp://10.0.0.21:5557", 0, "tcp://10.0.0.21:5557"},
		{"tcp://10.0.0.21:5557", 3, "tcp://10.0.0.21:5560"},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
		{"inproc://events", 2, "inproc://events_dp2"},
		{"", 2, ""},
	} {
		if got := RankEndpoint(tc.endpoint, tc.rank); got != tc.want {
			t.Errorf("RankEndpoint(%q, %d) = %q, want %q", tc.endpoint, tc.rank, got, tc.want)
		}
	}
}
