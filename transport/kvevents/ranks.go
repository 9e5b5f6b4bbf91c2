package kvevents

import (
	"strconv"
	"strings"
)

// RankEndpoint is where data-parallel rank n of an engine publishes (or answers replays) when
// its configured endpoint is endpoint: vLLM starts one publisher per rank and offsets a tcp
// endpoint's port by the rank, an inproc one's name by "_dp<n>" (vllm/distributed/kv_events.py,
// ZmqEventPublisher.offset_endpoint_port). Rank 0 and "" are endpoint itself.
func RankEndpoint(endpoint string, n int) string {
	if endpoint == "" || n == 0 {
		return endpoint
	}
	if strings.Contains(endpoint, "inproc") {
		return endpoint + "_dp" + strconv.Itoa(n)
	}
	i := strings.LastIndexByte(endpoint, ':')
	if i < 0 {
		return endpoint
	}
	port, err := strconv.Atoi(endpoint[i+1:])
	if err != nil {
		return endpoint
	}
	return endpoint[:i+1] + strconv.Itoa(port+n)
}
