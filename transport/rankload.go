package transport

import (
	"slices"
	"strconv"

	dto "github.com/prometheus/client_model/go"
)

// RankLoad is one data-parallel rank's gauges. vLLM's API server exports every rank's under
// the label engine="<rank>" (vllm/v1/metrics/loggers.py, PrometheusStatLogger: one series per
// engine index), so an engine started with --data-parallel-size N shows N values of it.
type RankLoad struct {
	Rank             int
	Running, Waiting int
}

// rankLoads are the per-rank running and waiting gauges of families, by rank, when the engine
// label names more than one rank; nil otherwise (a one-rank engine, or no engine label).
func rankLoads(families map[string]*dto.MetricFamily) []RankLoad {
	byRank := map[int]*RankLoad{}
	for name, into := range map[string]func(*RankLoad, int){
		"vllm:num_requests_running": func(r *RankLoad, v int) { r.Running += v },
		"vllm:num_requests_waiting": func(r *RankLoad, v int) { r.Waiting += v },
	} {
		f := families[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			rank, ok := engineLabel(m)
			if !ok {
				continue
			}
			r := byRank[rank]
			if r == nil {
				r = &RankLoad{Rank: rank}
				byRank[rank] = r
			}
			into(r, int(value(m)))
		}
	}
	if len(byRank) < 2 {
		return nil
	}
	out := make([]RankLoad, 0, len(byRank))
	for _, r := range byRank {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RankLoad) int { return a.Rank - b.Rank })
	return out
}

// engineLabel is a sample's engine label as a rank.
func engineLabel(m *dto.Metric) (int, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == "engine" {
			n, err := strconv.Atoi(l.GetValue())
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

// RankCount is how many data-parallel ranks the scrape showed: the highest rank plus one, 1
// when it showed none.
func (l EngineLoad) RankCount() int {
	if len(l.Ranks) == 0 {
		return 1
	}
	return l.Ranks[len(l.Ranks)-1].Rank + 1
}

// Rank is rank n's gauges, and whether the scrape showed it.
func (l EngineLoad) Rank(n int) (RankLoad, bool) {
	i, ok := slices.BinarySearchFunc(l.Ranks, n, func(r RankLoad, n int) int { return r.Rank - n })
	if !ok {
		return RankLoad{}, false
	}
	return l.Ranks[i], true
}
