package loadgen

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	json "github.com/goccy/go-json"
)

// injector carries out a FaultPlan: for a share of started requests it asks a random engine
// of the fault's role to apply the fault to its next matching leg.
type injector struct {
	plan    *FaultPlan
	byRole  map[string][]Engine
	engines []Engine
	total   float64
	client  *http.Client
	jobs    chan injection
	done    chan struct{}

	mu    sync.Mutex
	tally FaultTally
}

type injection struct {
	engine Engine
	kind   FaultKind
}

func newInjector(plan *FaultPlan, engines []Engine) (*injector, error) {
	in := &injector{plan: plan, byRole: map[string][]Engine{}, engines: engines,
		client: &http.Client{Timeout: 5 * time.Second},
		jobs:   make(chan injection, 4096), done: make(chan struct{}),
		tally: FaultTally{Injected: map[string]int{}, Consumed: map[string]int{}, AfterCommit: map[string]bool{}}}
	for _, e := range engines {
		in.byRole[e.Role] = append(in.byRole[e.Role], e)
	}
	for _, k := range plan.Kinds {
		if len(in.byRole[k.Role]) == 0 {
			return nil, fmt.Errorf("fault %s: no engine has the role %q", k.Spec, k.Role)
		}
		in.total += k.Weight
		in.tally.AfterCommit[k.Spec] = k.AfterCommit
	}
	if in.total <= 0 {
		return nil, fmt.Errorf("fault plan: no fault has a positive weight")
	}
	go in.work()
	return in, nil
}

// maybe injects one fault with probability plan.Rate. It never blocks the request.
func (in *injector) maybe() {
	if rand.Float64() >= in.plan.Rate {
		return
	}
	x := rand.Float64() * in.total
	k := in.plan.Kinds[len(in.plan.Kinds)-1]
	for _, c := range in.plan.Kinds {
		if x < c.Weight {
			k = c
			break
		}
		x -= c.Weight
	}
	es := in.byRole[k.Role]
	select {
	case in.jobs <- injection{engine: es[rand.IntN(len(es))], kind: k}:
	default:
		in.mu.Lock()
		in.tally.Failed++
		in.mu.Unlock()
	}
}

func (in *injector) work() {
	defer close(in.done)
	for j := range in.jobs {
		body, _ := json.Marshal(map[string]any{"fault": j.kind.Spec, "count": 1})
		resp, err := in.client.Post(j.engine.URL+"/sim/faults", "application/json", bytes.NewReader(body))
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		in.mu.Lock()
		if ok {
			in.tally.Injected[j.kind.Spec]++
		} else {
			in.tally.Failed++
		}
		in.mu.Unlock()
	}
}

// finish stops injecting, then lists and clears every engine's leftover faults: whatever is
// left was injected but never applied.
func (in *injector) finish() (*FaultTally, error) {
	close(in.jobs)
	<-in.done
	t := in.tally
	for k, v := range t.Injected {
		t.Consumed[k] = v
	}
	for _, e := range in.engines {
		left, err := in.list(e) // the phase has drained: nothing consumes faults any more

		if err != nil {
			return nil, err
		}
		req, _ := http.NewRequest(http.MethodDelete, e.URL+"/sim/faults", nil)
		resp, err := in.client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("clear faults on %s: %w", e.Name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for _, f := range left {
			t.Consumed[f.Fault] -= max(f.Remaining, 0)
		}
	}
	return &t, nil
}

func (in *injector) list(e Engine) ([]struct {
	Fault     string `json:"fault"`
	Remaining int    `json:"remaining"`
}, error) {
	resp, err := in.client.Get(e.URL + "/sim/faults")
	if err != nil {
		return nil, fmt.Errorf("list faults on %s: %w", e.Name, err)
	}
	defer resp.Body.Close()
	var out struct {
		Faults []struct {
			Fault     string `json:"fault"`
			Remaining int    `json:"remaining"`
		} `json:"faults"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("list faults on %s: %w", e.Name, err)
	}
	return out.Faults, nil
}
