package transport

import (
	"strconv"

	"github.com/narwhal-router/narwhal/transport/fault"
)

// RankHeader is the header vLLM's API server reads a request's data-parallel rank from
// (vllm/entrypoints/openai/engine/serving.py, _get_data_parallel_rank): with it the request
// goes to that rank's engine core; without it, or with a value that is not an integer, the
// API server balances the ranks itself (vllm/v1/engine/core_client.py, DPLBAsyncMPClient).
const RankHeader = "X-data-parallel-rank"

// Rank is the data-parallel rank a leg is pinned to; the zero Rank pins none.
type Rank struct{ plus1 int32 }

// PinRank is rank n (0-based).
func PinRank(n int) Rank { return Rank{int32(n) + 1} }

// Pinned is the rank and whether there is one.
func (r Rank) Pinned() (int, bool) { return int(r.plus1) - 1, r.plus1 > 0 }

// setRankHeader pins hreq's leg to its rank in req, when it has one.
func setRankHeader(set func(k, v string), req *Request, leg fault.Phase) {
	if n, ok := req.Ranks[leg].Pinned(); ok {
		set(RankHeader, strconv.Itoa(n))
	}
}
