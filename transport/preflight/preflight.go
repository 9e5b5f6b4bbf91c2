// Package preflight checks a fleet before Narwhal serves it (`narwhal preflight`): every
// engine's health and pinned contract, and one real KV transfer for every producer→consumer pair
// the roles permit, drawn as a matrix. A pair whose KV caches cannot match (kv.Mismatch over
// each engine's vllm:cache_config_info) is not tried: the matrix shows it incompatible, with why,
// as a pair the router keeps apart.
package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Result is the outcome of a preflight: every engine's contract check and every
// role-permitted producer→consumer KV transfer.
type Result struct {
	Engines []EngineCheck
	Pairs   []PairCheck
}

// EngineCheck is one engine's health and pinned-contract check.
type EngineCheck struct {
	Engine string
	Err    error
}

// PairCheck is one producer→consumer probe transfer.
type PairCheck struct {
	Producer, Consumer string
	Report             transport.ProbeReport
	Err                error
	// Incompatible says why the pair's KV caches cannot match (kv.Mismatch), when they cannot:
	// no transfer was tried, and the router never pairs the two. Not a failure.
	Incompatible string
}

// OK reports whether everything passed.
func (r Result) OK() bool {
	for _, e := range r.Engines {
		if e.Err != nil {
			return false
		}
	}
	for _, p := range r.Pairs {
		if p.Err != nil {
			return false
		}
	}
	return len(r.Unpaired()) == 0
}

// Unpaired names the engines whose every pair the roles permit is incompatible: a producer no
// consumer can read, or a consumer that can read no producer.
func (r Result) Unpaired() []string {
	usable := map[string]bool{}
	var names []string
	for _, p := range r.Pairs {
		for _, n := range []string{p.Producer + " (producer)", p.Consumer + " (consumer)"} {
			if _, seen := usable[n]; !seen {
				names = append(names, n)
			}
			usable[n] = usable[n] || p.Incompatible == ""
		}
	}
	var out []string
	for _, n := range names {
		if !usable[n] {
			out = append(out, n)
		}
	}
	return out
}

// Run checks every engine of engines (provisioned) against cfg's engine_contract (and /health),
// then probes every producer→consumer pair the roles allow, at most preflight.concurrency at a
// time, each leg bounded by engine.first_token_timeout_s. The probes are real transfers run by
// the same attempt runner as client requests, through each producer's own connector as its
// provisioning resolved it.
func Run(ctx context.Context, engines []transport.EngineSpec, cfg config.Config) Result {
	clients := make([]*transport.EngineClient, len(engines))
	for i, e := range engines {
		c := transport.NewEngineClient(e, cfg.Engine, cfg.Server.MaxResponseBytes)
		defer c.Close()
		clients[i] = c
	}
	legTimeout := cfg.Engine.FirstTokenTimeoutS.Duration()
	res := Result{Engines: make([]EngineCheck, len(clients))}
	models := make([][]string, len(clients))
	shapes := make([]kv.Shape, len(clients))
	sem := make(chan struct{}, cfg.Preflight.Concurrency)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res.Engines[i] = EngineCheck{Engine: c.Name()}
			models[i], res.Engines[i].Err = checkEngine(ctx, c, engines[i], cfg.EngineContract, legTimeout)
			shapes[i] = shapeOf(ctx, c, legTimeout)
		}()
	}
	wg.Wait()

	type job struct{ producer, consumer int }
	var jobs []job
	for pi, p := range engines {
		for ci, c := range engines {
			if pi != ci && p.Role.CanPrefill() && c.Role.CanDecode() {
				jobs = append(jobs, job{pi, ci})
				res.Pairs = append(res.Pairs, PairCheck{Producer: p.Name, Consumer: c.Name})
			}
		}
	}
	for i, j := range jobs {
		pc := &res.Pairs[i]
		if why := kv.Mismatch(shapes[j.producer], shapes[j.consumer]); why != "" {
			pc.Incompatible = why
			continue
		}
		model := commonModel(cfg.EngineContract, models[j.producer], models[j.consumer])
		if model == "" {
			pc.Err = fmt.Errorf("%s and %s serve no model in common", pc.Producer, pc.Consumer)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pc.Report, pc.Err = transport.ProbeTransfer(ctx, clients[j.producer], clients[j.consumer], model, legTimeout)
		}()
	}
	wg.Wait()
	return res
}

// checkEngine checks health and the contract, and returns the models the engine serves.
func checkEngine(ctx context.Context, c *transport.EngineClient, e transport.EngineSpec, contract *config.EngineContract, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Health(ctx); err != nil {
		return nil, err
	}
	if contract != nil {
		if err := transport.CheckContract(ctx, c, contract); err != nil {
			return nil, err
		}
	}
	if len(e.Models) > 0 {
		return e.Models, nil
	}
	return c.ModelIDs(ctx)
}

// shapeOf is the engine's KV shape as its /metrics reports it; the zero shape (nothing known)
// when it cannot be read.
func shapeOf(ctx context.Context, c *transport.EngineClient, timeout time.Duration) kv.Shape {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := c.Load(ctx)
	if err != nil {
		return kv.Shape{}
	}
	return l.Shape
}

func commonModel(contract *config.EngineContract, a, b []string) string {
	if contract != nil && contract.Model != "" {
		return contract.Model
	}
	for _, m := range a {
		for _, n := range b {
			if m == n {
				return m
			}
		}
	}
	return ""
}

// Matrix renders the result for a terminal: the engine checks, a producer × consumer grid,
// and every failure in full.
func (r Result) Matrix() string {
	var b strings.Builder
	b.WriteString("engines\n")
	for _, e := range r.Engines {
		status := "ok"
		if e.Err != nil {
			status = "FAIL  " + e.Err.Error()
		}
		fmt.Fprintf(&b, "  %-12s %s\n", e.Engine, status)
	}
	var producers, consumers []string
	cell := map[[2]string]PairCheck{}
	for _, p := range r.Pairs {
		if !slices.Contains(producers, p.Producer) {
			producers = append(producers, p.Producer)
		}
		if !slices.Contains(consumers, p.Consumer) {
			consumers = append(consumers, p.Consumer)
		}
		cell[[2]string{p.Producer, p.Consumer}] = p
	}
	b.WriteString("\nKV transfers (rows: producer, columns: consumer)\n")
	fmt.Fprintf(&b, "  %-12s", "")
	for _, c := range consumers {
		fmt.Fprintf(&b, " %-14s", c)
	}
	b.WriteByte('\n')
	for _, p := range producers {
		fmt.Fprintf(&b, "  %-12s", p)
		for _, c := range consumers {
			pc, ok := cell[[2]string{p, c}]
			switch {
			case !ok:
				fmt.Fprintf(&b, " %-14s", "-")
			case pc.Incompatible != "":
				fmt.Fprintf(&b, " %-14s", "incompatible")
			case pc.Err != nil:
				fmt.Fprintf(&b, " %-14s", "FAIL")
			default:
				fmt.Fprintf(&b, " %-14s", fmt.Sprintf("ok %.1fms", float64(pc.Report.Total)/float64(time.Millisecond)))
			}
		}
		b.WriteByte('\n')
	}
	var failed []string
	for _, p := range r.Pairs {
		if p.Err != nil {
			failed = append(failed, fmt.Sprintf("  %s → %s: %v", p.Producer, p.Consumer, p.Err))
		}
	}
	if len(failed) > 0 {
		b.WriteString("\nfailed transfers\n")
		b.WriteString(strings.Join(failed, "\n"))
		b.WriteByte('\n')
	}
	var apart []string
	for _, p := range r.Pairs {
		if p.Incompatible != "" {
			apart = append(apart, fmt.Sprintf("  %s → %s: %s", p.Producer, p.Consumer, p.Incompatible))
		}
	}
	if len(apart) > 0 {
		b.WriteString("\nincompatible KV caches (not tried; the router never pairs them)\n")
		b.WriteString(strings.Join(apart, "\n"))
		b.WriteByte('\n')
	}
	if un := r.Unpaired(); len(un) > 0 {
		b.WriteString("\nno compatible partner: " + strings.Join(un, ", ") + "\n")
	}
	if r.OK() {
		b.WriteString("\npreflight passed\n")
	} else {
		b.WriteString("\npreflight FAILED\n")
	}
	return b.String()
}
