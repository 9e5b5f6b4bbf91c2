package transport

import (
	"context"
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// planTransfer asks the producer's connector for the attempt's transfer parameters: through
// PlanContext when the connector must ask the producer something first (kv.ContextPlanner,
// Mooncake's bootstrap query), else Plan. A connector that cannot plan fails the attempt on the
// producer before either leg starts: its rejection as a bad handoff, anything else (a bootstrap
// server that does not answer) as an unreachable producer.
func planTransfer(ctx context.Context, producer *EngineClient, a kv.Attempt) (kv.Transfer, *fault.Fault) {
	cp, ok := producer.connector.(kv.ContextPlanner)
	if !ok {
		return producer.connector.Plan(a), nil
	}
	t, err := cp.PlanContext(ctx, a)
	if err == nil {
		return t, nil
	}
	if rej, ok := errors.AsType[*kv.Rejection](err); ok {
		return kv.Transfer{}, producer.descriptorFault(rej)
	}
	if ctx.Err() != nil {
		return kv.Transfer{}, fault.FromContext(ctx, producer.name, fault.PhasePrefill)
	}
	return kv.Transfer{}, &fault.Fault{Kind: fault.Unreachable, Phase: fault.PhasePrefill, Engine: producer.name,
		Detail: "the producer's " + producer.connector.Name() + " bootstrap server did not answer", Err: err}
}

// forgetTransfer tells a connector that learned something to plan a's attempt (kv.ContextPlanner)
// that the attempt failed: it asks the producer again next time.
func forgetTransfer(producer *EngineClient, a kv.Attempt) {
	if cp, ok := producer.connector.(kv.ContextPlanner); ok {
		cp.Forget(a)
	}
}

// setRank writes the leg's data-parallel rank when the transfer addresses ranks.
func setRank(hreq *fasthttp.Request, req *Request, leg fault.Phase) {
	t := &req.Transfer
	if !t.Ranked {
		return
	}
	rank := t.DecodeRank
	if leg == fault.PhasePrefill {
		rank = t.PrefillRank
	}
	hreq.Header.Set(RankHeader, strconv.Itoa(rank))
}

// withPlanned is r, a concurrent plan's prefill answer, with the plan's decode parameters as
// its descriptor: what a consumer would have received.
func (r PrefillResult) withPlanned(producer *EngineClient, req *Request) (PrefillResult, error) {
	p, err := planned(producer, req, r.Started)
	if err != nil {
		return PrefillResult{}, err
	}
	p.Completed, p.CachedTokens = r.Completed, r.CachedTokens
	return p, nil
}
