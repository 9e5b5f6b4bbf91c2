// Package discovery finds the engines of a fleet that changes while the router runs. A Source
// (the configuration file, Kubernetes pods selected by label, DNS names re-resolved on an
// interval, an etcd prefix of leased registrations, the admin API) reports the complete set of
// engines it knows whenever that set changes; the Catalog merges what every source reports into
// the one fleet the router runs, and keeps each source's last good set while the source fails.
//
// Sources speak config.Engine, the configuration file's own shape, so an engine found at run
// time is provisioned exactly like one listed in the file (transport.Provisioner, with the
// connector registry the router runs with) and checked the same way before it takes traffic.
package discovery

import (
	"context"

	"github.com/narwhal-router/narwhal/config"
)

// Source is one place engines are found.
type Source interface {
	// Name identifies the source in /engines, metrics and logs: "file", "admin",
	// "kubernetes", "dns decode.vllm.svc", "etcd /narwhal/engines/".
	Name() string
	// Run reports the source's complete current set of engines — once it first knows it, and
	// again on every change — until ctx ends; then it returns. A source that cannot reach what
	// it watches reports the error (Err set, Engines ignored) and keeps trying: the catalog
	// keeps the last set it had from it and says so. report is never called concurrently by
	// one source and must not block for long.
	Run(ctx context.Context, report func(Report))
}

// Report is what a source knows at one moment.
type Report struct {
	// Engines is the source's complete current set (not a delta). Every engine has a name that
	// is the same on every Narwhal node watching the same fleet, so cluster verdicts apply
	// everywhere, and that changes when the engine is a new process at a new address (a pod
	// recreated with a new IP is a new engine with a fresh breaker).
	Engines []config.Engine
	// Err says the source could not refresh its set; Engines is then ignored.
	Err error
}
