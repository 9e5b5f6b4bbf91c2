package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A fault is one entry of the fault vocabulary shared by prompt directives
// (@sim:<leg>.<fault>[=<arg>]) and engine-level injection ("<leg>.<fault>[=<arg>]").
type fault struct {
	spec    string // as written, for messages and listings
	leg     legFilter
	kind    faultKind
	n       int // silence_after, close_after, error_in_stream's @N, reasoning
	code    int // status, error_in_stream
	delay   time.Duration
	variant string // bad_descriptor
}

type legFilter uint8

const (
	legAny legFilter = iota
	legPrefillOnly
	legDecodeOnly
)

func (l legFilter) matches(g leg) bool {
	return l == legAny || (l == legPrefillOnly) == (g == legPrefill)
}

type faultKind uint8

const (
	faultRefuse faultKind = iota + 1
	faultHangHeaders
	faultHangFirstToken
	faultSilenceAfter
	faultCloseAfter
	faultDoneFirst
	faultErrorInStream
	faultStatus
	faultSlowFirstToken
	faultBadDescriptor
	faultWrongEngineID
	faultToolCall
	faultReasoning
	faultSlowHeaders
	faultKeepAlive
	faultKVPort
)

type faultSyntax struct {
	kind faultKind
	arg  string // "" for no argument, else how the argument reads in messages
	only leg    // legNone when the fault applies to both legs
}

var faultNames = map[string]faultSyntax{
	"refuse":           {kind: faultRefuse},
	"hang_headers":     {kind: faultHangHeaders},
	"hang_first_token": {kind: faultHangFirstToken},
	"silence_after":    {kind: faultSilenceAfter, arg: "N"},
	"close_after":      {kind: faultCloseAfter, arg: "N"},
	"done_first":       {kind: faultDoneFirst},
	"error_in_stream":  {kind: faultErrorInStream, arg: "CODE[@N]"},
	"status":           {kind: faultStatus, arg: "CODE"},
	"slow_first_token": {kind: faultSlowFirstToken, arg: "MS"},
	"bad_descriptor":   {kind: faultBadDescriptor, arg: "missing_engine|bad_blocks|wrong_connector|wrong_endpoint|null", only: legPrefill},
	"wrong_engine_id":  {kind: faultWrongEngineID, only: legPrefill},
	"tool_call":        {kind: faultToolCall, only: legDecode},
	"reasoning":        {kind: faultReasoning, arg: "N", only: legDecode},
	"slow_headers":     {kind: faultSlowHeaders, arg: "MS"},
	"keepalive":        {kind: faultKeepAlive, arg: "MS", only: legDecode},
	"kv_port":          {kind: faultKVPort, arg: "PORT", only: legPrefill},
}

// Values of bad_descriptor.
const (
	badMissingEngine  = "missing_engine"
	badBlocks         = "bad_blocks"
	badWrongConnector = "wrong_connector"
	badWrongEndpoint  = "wrong_endpoint"
	badNull           = "null"
)

// parseFault parses "<leg>.<fault>[=<arg>]".
func parseFault(spec string) (fault, error) {
	f := fault{spec: spec}
	legName, rest, ok := strings.Cut(spec, ".")
	if !ok {
		return f, fmt.Errorf("fault %q: want <leg>.<fault>[=<arg>] with leg prefill, decode or any", spec)
	}
	switch legName {
	case "any":
		f.leg = legAny
	case "prefill":
		f.leg = legPrefillOnly
	case "decode":
		f.leg = legDecodeOnly
	default:
		return f, fmt.Errorf("fault %q: unknown leg %q (want prefill, decode or any)", spec, legName)
	}
	name, arg, hasArg := strings.Cut(rest, "=")
	syn, ok := faultNames[name]
	if !ok {
		return f, fmt.Errorf("fault %q: unknown fault %q", spec, name)
	}
	f.kind = syn.kind
	if syn.only != legNone && f.leg != legAny && !f.leg.matches(syn.only) {
		return f, fmt.Errorf("fault %q: %s applies to the %s leg only", spec, name, syn.only)
	}
	switch {
	case syn.arg == "" && hasArg:
		return f, fmt.Errorf("fault %q: %s takes no argument", spec, name)
	case syn.arg != "" && (!hasArg || arg == ""):
		return f, fmt.Errorf("fault %q: %s needs an argument: %s=%s", spec, name, name, syn.arg)
	}
	bad := func() (fault, error) {
		return f, fmt.Errorf("fault %q: bad argument %q, want %s=%s", spec, arg, name, syn.arg)
	}
	var err error
	switch f.kind {
	case faultSilenceAfter, faultCloseAfter, faultReasoning:
		if f.n, err = strconv.Atoi(arg); err != nil || f.n < 0 {
			return bad()
		}
	case faultStatus:
		if f.code, err = strconv.Atoi(arg); err != nil || f.code < 400 || f.code > 599 {
			return bad()
		}
	case faultErrorInStream:
		codeText, after, hasAfter := strings.Cut(arg, "@")
		if f.code, err = strconv.Atoi(codeText); err != nil || f.code < 400 || f.code > 599 {
			return bad()
		}
		if hasAfter {
			if f.n, err = strconv.Atoi(after); err != nil || f.n < 0 {
				return bad()
			}
		}
	case faultSlowFirstToken, faultSlowHeaders:
		ms, err := strconv.Atoi(arg)
		if err != nil || ms < 0 {
			return bad()
		}
		f.delay = time.Duration(ms) * time.Millisecond
	case faultKeepAlive:
		ms, err := strconv.Atoi(arg)
		if err != nil || ms <= 0 {
			return bad()
		}
		f.delay = time.Duration(ms) * time.Millisecond
	case faultKVPort:
		if f.n, err = strconv.Atoi(arg); err != nil || f.n < 1 || f.n > 65535 {
			return bad()
		}
	case faultBadDescriptor:
		switch arg {
		case badMissingEngine, badBlocks, badWrongConnector, badWrongEndpoint, badNull:
			f.variant = arg
		default:
			return bad()
		}
	}
	return f, nil
}

// faultPlan is what the faults matching one request make it do. Later faults of the
// same kind override earlier ones.
type faultPlan struct {
	refuse, hangHeaders, hangFirstToken, doneFirst bool
	toolCall, wrongEngineID                        bool
	status                                         int
	silenceAfter, closeAfter, errorAfter           int // token index; -1 = none
	errorCode                                      int
	slow, slowHeaders                              time.Duration
	keepAlive                                      time.Duration // decode streams: comment interval while waiting
	badDescriptor                                  string
	reasoning                                      int
	kvPort                                         int // the descriptor's remote_port instead of the KV port (0: none)
}

func newFaultPlan() faultPlan {
	return faultPlan{silenceAfter: -1, closeAfter: -1, errorAfter: -1}
}

// apply adds f to the plan if it matches leg g.
func (p *faultPlan) apply(f fault, g leg) {
	if !f.leg.matches(g) {
		return
	}
	switch f.kind {
	case faultRefuse:
		p.refuse = true
	case faultHangHeaders:
		p.hangHeaders = true
	case faultHangFirstToken:
		p.hangFirstToken = true
	case faultSilenceAfter:
		p.silenceAfter = f.n
	case faultCloseAfter:
		p.closeAfter = f.n
	case faultDoneFirst:
		p.doneFirst = true
	case faultErrorInStream:
		p.errorAfter, p.errorCode = f.n, f.code
	case faultStatus:
		p.status = f.code
	case faultSlowFirstToken:
		p.slow += f.delay
	case faultSlowHeaders:
		p.slowHeaders += f.delay
	case faultKeepAlive:
		if g == legDecode {
			p.keepAlive = f.delay
		}
	case faultBadDescriptor:
		if g == legPrefill {
			p.badDescriptor = f.variant
		}
	case faultWrongEngineID:
		p.wrongEngineID = g == legPrefill
	case faultKVPort:
		if g == legPrefill {
			p.kvPort = f.n
		}
	case faultToolCall:
		p.toolCall = g == legDecode
	case faultReasoning:
		if g == legDecode {
			p.reasoning = f.n
		}
	}
}

// hangsBeforeOutput reports whether a request that cannot stream (non-streaming or a
// prefill leg) should hang: every fault that would go silent before completion does.
func (p *faultPlan) hangsBeforeOutput() bool {
	return p.hangHeaders || p.hangFirstToken || p.silenceAfter >= 0
}

// faultQueue holds the faults injected into an engine at run time.
type faultQueue struct {
	mu    sync.Mutex
	items []*queuedFault
}

type queuedFault struct {
	fault
	remaining int // < 0: until cleared
}

// FaultStatus describes one injected fault in GET /sim/faults.
type FaultStatus struct {
	Fault     string `json:"fault"`
	Remaining int    `json:"remaining"` // -1: until cleared
}

var errNoFault = errors.New("empty fault")

func (q *faultQueue) add(spec string, count int) error {
	if spec == "" {
		return errNoFault
	}
	f, err := parseFault(spec)
	if err != nil {
		return err
	}
	if count <= 0 {
		count = -1
	}
	q.mu.Lock()
	q.items = append(q.items, &queuedFault{fault: f, remaining: count})
	q.mu.Unlock()
	return nil
}

func (q *faultQueue) clear() {
	q.mu.Lock()
	q.items = nil
	q.mu.Unlock()
}

// applyTo applies every queued fault matching leg g to p, consuming one use of each.
func (q *faultQueue) applyTo(p *faultPlan, g leg) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return
	}
	kept := q.items[:0]
	for _, it := range q.items {
		if it.leg.matches(g) {
			p.apply(it.fault, g)
			if it.remaining > 0 {
				it.remaining--
				if it.remaining == 0 {
					continue
				}
			}
		}
		kept = append(kept, it)
	}
	clear(q.items[len(kept):])
	q.items = kept
}

func (q *faultQueue) list() []FaultStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]FaultStatus, 0, len(q.items))
	for _, it := range q.items {
		out = append(out, FaultStatus{Fault: it.spec, Remaining: it.remaining})
	}
	return out
}
