package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kvevents"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// maxReconnect caps the wait before following a broken stream again.
const maxReconnect = 30 * time.Second

// kvFeeds follows the KV cache events of every engine that has a KV event endpoint
// (placement.kv_events, engines[].kv_events), one goroutine each, into the exact prefix index.
// Events never pass through an actor: a batch is applied to the index by the goroutine that
// received it, and placement reads the index under its read lock. Engines are added as they
// join the fleet and removed as they leave it (the index forgets them at once); stop ends
// every feed.
//
// A feed falls back to the estimate (the index's lost) whenever what it knows may be wrong:
// before its first batch, after a gap the replay could not fill, after the publisher started
// over, while the stream is broken. A broken stream is followed again after reconnect_s,
// doubling to 30 s while it keeps failing.
type kvFeeds struct {
	*perEngine
	cfg   config.KVEventsRuntime
	index *placement.ExactIndex
	m     *telemetry.Metrics
	log   *slog.Logger
}

func startKVFeeds(cfg config.KVEventsRuntime, index *placement.ExactIndex, m *telemetry.Metrics, log *slog.Logger) *kvFeeds {
	return &kvFeeds{perEngine: newPerEngine(), cfg: cfg, index: index, m: m, log: telemetry.Throttle(log, time.Minute, 10)}
}

// add follows v's events if spec names (or the fleet's patterns give) an endpoint.
func (f *kvFeeds) add(v *placement.Engine, spec transport.EngineSpec) {
	pub, replay, ok := f.endpoints(v, spec)
	if !ok {
		return
	}
	var en *placement.ExactEngine
	f.start(v, func() { en = f.index.Open(v.Idx) }, func(ctx context.Context) { f.follow(ctx, v, 0, en, pub, replay) })
	f.addRanks(v, spec)
}

// addRanks follows the events of v's data-parallel ranks past the first (rank 0's are v's own
// feed): each rank publishes on its own endpoints, offset by its rank (kvevents.RankEndpoint).
func (f *kvFeeds) addRanks(v *placement.Engine, spec transport.EngineSpec) {
	pub, replay, ok := f.endpoints(v, spec)
	if !ok {
		return
	}
	for _, r := range v.Ranks() {
		if r.N == 0 || r.Idx < 0 {
			continue
		}
		var en *placement.ExactEngine
		f.start(r, func() { en = f.index.Open(r.Idx) }, func(ctx context.Context) {
			f.follow(ctx, v, r.N, en, kvevents.RankEndpoint(pub, r.N), kvevents.RankEndpoint(replay, r.N))
		})
	}
}

// endpoints are v's KV event endpoints (rank 0's), when its events are followed: feeds are
// on, v has a prefix-index slot, and spec names (or the fleet's patterns give) an endpoint.
func (f *kvFeeds) endpoints(v *placement.Engine, spec transport.EngineSpec) (pub, replay string, ok bool) {
	if f == nil || v.Idx < 0 {
		return "", "", false
	}
	pub, replay = f.cfg.Endpoints(spec.KVEvents, spec.KV.Host)
	return pub, replay, pub != ""
}

// remove stops following v (and its ranks) and drops their entries from the index.
func (f *kvFeeds) remove(v *placement.Engine) {
	if f == nil {
		return
	}
	if f.end(v) {
		f.index.Forget(v.Idx)
	}
	for _, r := range v.Ranks() {
		if r.N > 0 && f.end(r) {
			f.index.Forget(r.Idx)
		}
	}
}

func (f *kvFeeds) stop() {
	if f != nil {
		f.perEngine.stop()
	}
}

// follow runs the subscription of v's rank until ctx ends, following it again after each
// failure. A batch from another rank (its data_parallel_rank says so: endpoints crossed) is
// not applied.
func (f *kvFeeds) follow(ctx context.Context, v *placement.Engine, rank int, en *placement.ExactEngine, pub, replay string) {
	wait := f.cfg.Reconnect
	report := func() { // the engine's blocks, all its ranks' together
		held := 0
		for _, slot := range v.IndexSlots() {
			held += f.index.HeldAt(slot)
		}
		f.m.KVIndexBlocks(v.Name, held)
	}
	for {
		sub := kvevents.Subscriber{Endpoint: pub, Replay: replay, Topic: f.cfg.Topic, ReplayTimeout: f.cfg.ReplayTimeout,
			Handle: func(_ uint64, b kvevents.Batch) {
				if b.DataParallelRank != nil && *b.DataParallelRank != rank {
					f.m.KVEvents(v.Name, "wrong_rank")
					return
				}
				f.index.Apply(en, b)
				f.m.KVEvents(v.Name, "batch")
				report()
				wait = f.cfg.Reconnect
			},
			Gap: func(first, last uint64) {
				f.index.Lost(en)
				f.m.KVEvents(v.Name, "gap")
				report()
				f.log.Warn("KV events lost: the engine's exact prefix index starts over", "engine", v.Name,
					"first", first, "last", last, "replay", replay)
			},
			Restart: func(seq uint64) {
				f.index.Lost(en)
				f.m.KVEvents(v.Name, "restart")
				report()
				f.log.Info("KV event publisher started over: the engine's exact prefix index starts over", "engine", v.Name, "seq", seq)
			},
		}
		err := sub.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		f.index.Lost(en)
		f.m.KVEvents(v.Name, kvevents.Result(err))
		report()
		f.log.Warn("KV event stream broke: placing on the estimate until it is followed again", "engine", v.Name,
			"endpoint", pub, "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxReconnect)
	}
}
