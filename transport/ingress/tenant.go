package ingress

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Flow is whom a request is for when the fleet is full: its tenant, the tenant's weight, and its
// priority band (flow_control). The admission queue (actors/flow) reads it; metrics read Label.
type Flow struct {
	// Tenant tells tenants apart in the queue: a listed tenant's name, "key-N" for the N-th
	// unlisted API key, a name a trusted header gave, or "anonymous" without authentication.
	Tenant string
	// Label is the tenant as metrics show it: a listed tenant's name, "other" for any other, or
	// "anonymous". The label set is bounded by the configuration.
	Label  string
	Weight float64
	// Band indexes flow_control.bands (0 the highest); Sheddable and TTFTTarget are the band's
	// own settings (ttft_target_s: 0 none).
	Band       int
	BandName   string
	Sheddable  bool
	TTFTTarget time.Duration
}

// flowTable is flow_control as ingress applies it: which tenant each API key belongs to and
// what it may ask for.
type flowTable struct {
	cfg      config.FlowControl
	byDigest map[[sha256.Size]byte]int // key digest → index in cfg.Tenants
	byName   map[string]int
}

func newFlowTable(fc config.FlowControl) *flowTable {
	t := &flowTable{cfg: fc, byDigest: map[[sha256.Size]byte]int{}, byName: map[string]int{}}
	for i, tn := range fc.Tenants {
		t.byName[tn.Name] = i
		for _, k := range tn.APIKeys {
			t.byDigest[sha256.Sum256([]byte(k))] = i
		}
	}
	return t
}

// SetFlowControl applies flow_control (at start and at each reload): requests that arrive from
// now on are classified by it. The tenants' keys must also be among the client keys the
// listener was given (node adds them).
func (in *Ingress) SetFlowControl(fc config.FlowControl) { in.flows.Store(newFlowTable(fc)) }

// classify finds the request's flow: its key's tenant, a tenant header its key may set, a band
// header within its tenant's allowance. A header it may not use, or a malformed one, is the 400
// returned, naming it.
func (t *flowTable) classify(ctx *fasthttp.RequestCtx, keys *keyring, slot int) (f Flow, bad *fault.ErrorBody) {
	if t == nil {
		return Flow{Tenant: "anonymous", Label: "anonymous", Weight: 1, BandName: "default"}, nil
	}
	listed := -1
	switch {
	case slot == noKey:
		f = Flow{Tenant: "anonymous", Label: "anonymous", Weight: 1}
	default:
		if i, found := t.byDigest[keys.digests[slot]]; found {
			listed = i
			f = t.listed(i)
		} else {
			f = Flow{Tenant: "key-" + strconv.Itoa(slot), Label: "other", Weight: t.cfg.UnlistedWeight}
		}
	}
	f.Band = t.cfg.BandIndex("")
	if listed >= 0 && t.cfg.Tenants[listed].Band != "" {
		f.Band = t.cfg.BandIndex(t.cfg.Tenants[listed].Band)
	}
	if h := ctx.Request.Header.Peek(t.cfg.TenantHeader); len(h) > 0 && t.cfg.TenantHeader != "" {
		if listed < 0 || !t.cfg.Tenants[listed].MaySetTenant {
			return f, badFlow(fmt.Sprintf("this API key may not set %s (flow_control.tenants[].may_set_tenant)", t.cfg.TenantHeader), "tenant_not_allowed")
		}
		name := string(h)
		if why := config.ValidTenantName(name); why != "" {
			return f, badFlow(fmt.Sprintf("%s %s, got %q", t.cfg.TenantHeader, why, excerptHeader(h)), "invalid_tenant")
		}
		if i, found := t.byName[name]; found {
			f = t.listed(i)
		} else {
			f = Flow{Tenant: "header-" + name, Label: "other", Weight: t.cfg.UnlistedWeight, Band: f.Band}
		}
	}
	if h := ctx.Request.Header.Peek(t.cfg.BandHeader); len(h) > 0 && t.cfg.BandHeader != "" {
		b := t.cfg.BandIndex(string(h))
		if b < 0 {
			return f, badFlow(fmt.Sprintf("%s names no band, got %q (bands: flow_control.bands)", t.cfg.BandHeader, excerptHeader(h)), "invalid_band")
		}
		if b != f.Band && !t.allows(listed, string(h)) {
			return f, badFlow(fmt.Sprintf("this API key may not use band %q (flow_control.tenants[].bands)", string(h)), "band_not_allowed")
		}
		f.Band = b
	}
	if len(t.cfg.Bands) > 0 {
		b := t.cfg.Bands[f.Band]
		f.BandName, f.Sheddable, f.TTFTTarget = b.Name, b.Sheddable, b.TTFTTargetS.Duration()
	} else {
		f.BandName = "default"
	}
	return f, nil
}

// listed is the flow of the i-th listed tenant, in its own band.
func (t *flowTable) listed(i int) Flow {
	tn := t.cfg.Tenants[i]
	w := tn.Weight
	if w == 0 {
		w = 1
	}
	return Flow{Tenant: tn.Name, Label: tn.Name, Weight: w, Band: t.cfg.BandIndex(tn.Band)}
}

// allows reports whether the listed tenant i may ask for the band.
func (t *flowTable) allows(i int, band string) bool {
	if i < 0 {
		return false
	}
	for _, b := range t.cfg.Tenants[i].Bands {
		if b == band {
			return true
		}
	}
	return false
}

func badFlow(msg, code string) *fault.ErrorBody {
	return &fault.ErrorBody{Message: msg, Type: fault.ErrorType(400), Code: code}
}
