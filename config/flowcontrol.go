package config

import (
	"fmt"
	"strings"
)

// FlowControl configures how the admission queue shares a full fleet between tenants and
// priority bands (package actors/flow). It applies only while requests wait: with room on the
// fleet every request is placed at once.
type FlowControl struct {
	// Bands are the priority bands, highest first; none configured means one band, "default".
	Bands []FlowBand `yaml:"bands"`
	// DefaultBand is the band of a request whose tenant names none; "" means the last band
	// that is not sheddable.
	DefaultBand string `yaml:"default_band"`
	// TenantHeader names a request header that sets the tenant, honoured only from an API key
	// whose tenant has may_set_tenant (a gateway that serves many teams with one key).
	TenantHeader string `yaml:"tenant_header"`
	// BandHeader names a request header that asks for a band among those the key's tenant may
	// use (its bands list); a band outside the allowance is a 400.
	BandHeader string `yaml:"band_header"`
	// MaxQueuedPerTenant bounds one tenant's waiting requests (429 past it); 0 means only
	// admission.max_queue bounds them.
	MaxQueuedPerTenant int `yaml:"max_queued_per_tenant"`
	// UnlistedWeight is the weight of a tenant not listed here: each unlisted API key is a
	// tenant of its own, and so is each tenant named by a trusted header.
	UnlistedWeight float64 `yaml:"unlisted_weight"`
	// DefaultOutputTokens is the expected output of a request that sets no max_tokens, for its
	// estimated cost (prompt plus expected output).
	DefaultOutputTokens int `yaml:"default_output_tokens"`
	// Tenants lists the tenants with their keys, weights and bands.
	Tenants []Tenant `yaml:"tenants"`
}

// FlowBand is one priority band.
type FlowBand struct {
	Name string `yaml:"name"`
	// Sheddable requests never wait: with no engine room they are refused at once (503).
	Sheddable bool `yaml:"sheddable"`
	// TTFTTargetS, when set, is the band's deadline for a slot after arrival; the earlier of it
	// and the request's own deadline orders the band's requests and refuses those it cannot meet.
	TTFTTargetS Seconds `yaml:"ttft_target_s"`
}

// Tenant is one tenant of the fleet.
type Tenant struct {
	Name string `yaml:"name"`
	// APIKeys are the tenant's client keys; they are client API keys like server.api_keys
	// (listing them there too is not needed).
	APIKeys []string `yaml:"api_keys"`
	// Weight is the tenant's share of a band relative to the other tenants waiting in it,
	// measured in estimated tokens (default 1).
	Weight float64 `yaml:"weight"`
	// Band is the tenant's band; "" means flow_control.default_band.
	Band string `yaml:"band"`
	// Bands are the bands the tenant may ask for with band_header (its own band always).
	Bands []string `yaml:"bands"`
	// MaySetTenant lets the tenant's keys name another tenant with tenant_header.
	MaySetTenant bool `yaml:"may_set_tenant"`
}

func defaultFlowControl() FlowControl {
	return FlowControl{
		TenantHeader:        "X-Narwhal-Tenant",
		BandHeader:          "X-Narwhal-Priority",
		UnlistedWeight:      1,
		DefaultOutputTokens: 256,
	}
}

// MaxTenantNameBytes bounds a tenant's name, from the file or a trusted header.
const MaxTenantNameBytes = 64

// ValidTenantName reports what is wrong with a tenant name ("" when nothing): 1 to 64 bytes of
// letters, digits, '-', '_' and '.'.
func ValidTenantName(s string) string {
	if s == "" || len(s) > MaxTenantNameBytes {
		return fmt.Sprintf("must be 1 to %d bytes", MaxTenantNameBytes)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "may hold only letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

// BandIndex is the index of the named band (0 the highest), the default band for "", and -1
// for a name no band has.
func (f FlowControl) BandIndex(name string) int {
	if len(f.Bands) == 0 {
		if name == "" || name == "default" {
			return 0
		}
		return -1
	}
	if name == "" {
		name = f.DefaultBand
	}
	if name == "" {
		for i := len(f.Bands) - 1; i >= 0; i-- {
			if !f.Bands[i].Sheddable {
				return i
			}
		}
		return len(f.Bands) - 1
	}
	for i, b := range f.Bands {
		if b.Name == name {
			return i
		}
	}
	return -1
}

func (f FlowControl) check(ck *checker) {
	bands := map[string]bool{}
	for i, b := range f.Bands {
		p := fmt.Sprintf("flow_control.bands[%d]", i)
		ck.flowName(p+".name", "band", b.Name, bands)
		ck.nonNegative(p+".ttft_target_s", b.TTFTTargetS)
	}
	knownBand := func(path, name string) {
		if name != "" && f.BandIndex(name) < 0 {
			ck.fail(path, "names band %q, which flow_control.bands does not define (bands: %s)", name, f.bandNames())
		}
	}
	knownBand("flow_control.default_band", f.DefaultBand)
	for _, h := range []struct{ path, v string }{{"flow_control.tenant_header", f.TenantHeader}, {"flow_control.band_header", f.BandHeader}} {
		if strings.ContainsAny(h.v, " \t\r\n:") {
			ck.fail(h.path, "%q is not a header name", h.v)
		}
	}
	if f.MaxQueuedPerTenant < 0 {
		ck.fail("flow_control.max_queued_per_tenant", "must be 0 (only admission.max_queue) or more, got %d", f.MaxQueuedPerTenant)
	}
	if !(f.UnlistedWeight > 0) {
		ck.fail("flow_control.unlisted_weight", "must be greater than 0, got %v", f.UnlistedWeight)
	}
	if f.DefaultOutputTokens < 1 {
		ck.fail("flow_control.default_output_tokens", "must be at least 1, got %d", f.DefaultOutputTokens)
	}
	names := map[string]bool{}
	keyOwner := map[string]int{}
	for i, t := range f.Tenants {
		p := fmt.Sprintf("flow_control.tenants[%d]", i)
		ck.flowName(p+".name", "tenant", t.Name, names)
		if t.Weight < 0 {
			ck.fail(p+".weight", "must be greater than 0 (or left out for 1), got %v", t.Weight)
		}
		knownBand(p+".band", t.Band)
		for j, b := range t.Bands {
			knownBand(fmt.Sprintf("%s.bands[%d]", p, j), b)
		}
		for j, k := range t.APIKeys {
			if k == "" || strings.ContainsAny(k, " \t\r\n") {
				// The key's value never appears in a message, only its position.
				ck.fail(fmt.Sprintf("%s.api_keys[%d]", p, j), "must be a non-empty string without spaces")
			} else if owner, dup := keyOwner[k]; dup {
				ck.fail(fmt.Sprintf("%s.api_keys[%d]", p, j), "is already a key of flow_control.tenants[%d]; a key belongs to one tenant", owner)
			} else {
				keyOwner[k] = i
			}
		}
	}
}

// flowName records what is wrong with a band's or tenant's name: its form, or a repeat of one
// in seen (which it joins).
func (ck *checker) flowName(path, kind, name string, seen map[string]bool) {
	if why := ValidTenantName(name); why != "" {
		ck.fail(path, "%s", why)
	} else if seen[name] {
		ck.fail(path, "repeats %s %q; name each %s once", kind, name, kind)
	}
	seen[name] = true
}

func (f FlowControl) bandNames() string {
	if len(f.Bands) == 0 {
		return "none configured, so only \"default\""
	}
	var out []string
	for _, b := range f.Bands {
		out = append(out, b.Name)
	}
	return strings.Join(out, ", ")
}

// TenantKeys are every key the tenants list, each once: client API keys like server.api_keys.
func (f FlowControl) TenantKeys() []string {
	var out []string
	for _, t := range f.Tenants {
		out = append(out, t.APIKeys...)
	}
	return out
}
