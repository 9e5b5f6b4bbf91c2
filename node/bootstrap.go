package node

import (
	"log/slog"

	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// bootstrapEvents is what the Mooncake connector learns from producers' bootstrap servers
// (kv.BootstrapObserver), reported: every recheck counted by its result, each producer restart
// logged once.
type bootstrapEvents struct {
	metrics *telemetry.Metrics
	log     *slog.Logger
}

var _ kv.BootstrapObserver = bootstrapEvents{}

func (b bootstrapEvents) Rechecked(producer, result string, err error) {
	b.metrics.BootstrapRecheck(producer, result)
	if err != nil {
		b.log.Debug("mooncake bootstrap recheck failed; the cached engine ids stay in use", "engine", producer, "error", err.Error())
	}
}

func (b bootstrapEvents) Restarted(producer, addr string, before, after []string) {
	b.log.Warn("mooncake producer restarted: its bootstrap server lists new engine ids; attempts handed the old ones end as stale_engine_id and are retried",
		"engine", producer, "bootstrap", addr, "engine_ids", after, "were", before)
}
