package loadgen

import (
	"errors"
	"fmt"
)

// BandHeader is the request header a flow's band is sent in: the router's default
// flow_control.band_header.
const BandHeader = "X-Narwhal-Priority"

// Flow is one kind of client within a phase: a tenant (its API key) asking for a priority band.
// Each request of a phase with flows is one flow's, picked at random by share, and the result
// keeps every flow's counts and samples apart (Result.Flows).
type Flow struct {
	// Name names the flow in the result.
	Name string `json:"name"`
	// Key, when set, is sent as `Authorization: Bearer <key>`.
	Key string `json:"key,omitempty"`
	// Band, when set, is sent in BandHeader.
	Band string `json:"band,omitempty"`
	// Share is the flow's part of the phase's requests, relative to the other flows' shares.
	Share float64 `json:"share"`
}

// flowPicker chooses a flow by share from a uniform number: a pure rule, so that the choice is
// tested without randomness.
type flowPicker struct {
	cum []float64 // cum[i]: the shares of flows 0..i over the total; the last is 1
}

func newFlowPicker(flows []Flow) (*flowPicker, error) {
	if len(flows) == 0 {
		return nil, errors.New("no flows")
	}
	var total float64
	seen := map[string]bool{}
	for _, f := range flows {
		if f.Name == "" || seen[f.Name] {
			return nil, fmt.Errorf("flow %q: each flow needs a name of its own", f.Name)
		}
		seen[f.Name] = true
		if !(f.Share > 0) {
			return nil, fmt.Errorf("flow %s: share must be greater than 0, got %v", f.Name, f.Share)
		}
		total += f.Share
	}
	p := &flowPicker{cum: make([]float64, len(flows))}
	var acc float64
	for i, f := range flows {
		acc += f.Share
		p.cum[i] = acc / total
	}
	p.cum[len(p.cum)-1] = 1 // no rounding gap above the last flow
	return p, nil
}

// pick is the flow whose slice of [0, 1) holds u: flow i for u in [cum[i-1], cum[i]).
func (p *flowPicker) pick(u float64) int {
	for i, c := range p.cum {
		if u < c {
			return i
		}
	}
	return len(p.cum) - 1
}
