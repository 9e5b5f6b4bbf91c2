package ingress

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/config"
)

func TestARequestsFlowComesFromItsKeyAndTheHeadersItMayUse(t *testing.T) {
	fc := config.Default().FlowControl
	fc.Bands = []config.FlowBand{{Name: "interactive"}, {Name: "standard"}, {Name: "batch", Sheddable: true}}
	fc.UnlistedWeight = 0.5
	fc.Tenants = []config.Tenant{
		{Name: "search", APIKeys: []string{"k-search"}, Weight: 3, Band: "interactive", Bands: []string{"batch"}},
		{Name: "gateway", APIKeys: []string{"k-gw"}, MaySetTenant: true},
		{Name: "team-b", APIKeys: []string{"k-b"}, Weight: 2},
	}
	keys := newKeyring([]string{"k-search", "k-gw", "k-b", "k-plain"}, 0, nil)
	table := newFlowTable(fc)
	for _, tc := range []struct {
		name    string
		key     string // "" no key (authentication off)
		headers map[string]string
		want    Flow
		code    string // the 400's code, "" none
	}{
		{name: "a listed tenant's key, its own band", key: "k-search",
			want: Flow{Tenant: "search", Label: "search", Weight: 3, Band: 0, BandName: "interactive"}},
		{name: "a listed tenant with no band gets the last band that is not sheddable", key: "k-b",
			want: Flow{Tenant: "team-b", Label: "team-b", Weight: 2, Band: 1, BandName: "standard"}},
		{name: "an unlisted key is a tenant of its own, labelled other", key: "k-plain",
			want: Flow{Tenant: "key-3", Label: "other", Weight: 0.5, Band: 1, BandName: "standard"}},
		{name: "a band within the allowance", key: "k-search", headers: map[string]string{"X-Narwhal-Priority": "batch"},
			want: Flow{Tenant: "search", Label: "search", Weight: 3, Band: 2, BandName: "batch", Sheddable: true}},
		{name: "a band outside the allowance", key: "k-b", headers: map[string]string{"X-Narwhal-Priority": "interactive"}, code: "band_not_allowed"},
		{name: "a band nobody defined", key: "k-b", headers: map[string]string{"X-Narwhal-Priority": "gold"}, code: "invalid_band"},
		{name: "a gateway names a listed tenant", key: "k-gw", headers: map[string]string{"X-Narwhal-Tenant": "team-b"},
			want: Flow{Tenant: "team-b", Label: "team-b", Weight: 2, Band: 1, BandName: "standard"}},
		{name: "a gateway names an unlisted tenant", key: "k-gw", headers: map[string]string{"X-Narwhal-Tenant": "t.42"},
			want: Flow{Tenant: "header-t.42", Label: "other", Weight: 0.5, Band: 1, BandName: "standard"}},
		{name: "a key that may not set the tenant", key: "k-b", headers: map[string]string{"X-Narwhal-Tenant": "search"}, code: "tenant_not_allowed"},
		{name: "a malformed tenant name", key: "k-gw", headers: map[string]string{"X-Narwhal-Tenant": "a b"}, code: "invalid_tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			for k, v := range tc.headers {
				ctx.Request.Header.Set(k, v)
			}
			slot := noKey
			if tc.key != "" {
				ctx.Request.Header.Set("Authorization", "Bearer "+tc.key)
				var ok bool
				if slot, ok = keys.admit(&ctx); !ok {
					t.Fatal("key refused")
				}
			}
			got, bad := table.classify(&ctx, keys, slot)
			switch {
			case tc.code != "":
				if bad == nil || bad.Code != tc.code {
					t.Fatalf("got %+v, %+v; want a 400 %s", got, bad, tc.code)
				}
			case bad != nil:
				t.Fatalf("refused: %+v", bad)
			case got != tc.want:
				t.Fatalf("flow %+v, want %+v", got, tc.want)
			}
		})
	}
}
