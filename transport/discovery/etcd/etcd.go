// Package etcd is the engine source of an etcd key prefix: engines, or sidecars beside them,
// register one engine a key (its value an engine in the configuration file's shape, JSON or
// YAML), usually under a lease, so that an engine whose registrant stops renewing it leaves the
// fleet when the lease lapses. The source reads the prefix, watches it from the revision it
// read, and reads it anew when the watch cannot resume (compaction, a lost connection). Every
// call to etcd has a deadline, and a check while watching notices an etcd that stopped
// answering: an unreachable etcd is an error report, never a silent wait.
package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery"
)

// keepAliveTime is how often the client pings etcd on an idle connection (etcd refuses pings
// more often than every 5 s by default); a ping unanswered within the request timeout closes
// the connection.
const keepAliveTime = 10 * time.Second

// Source watches one etcd prefix.
type Source struct {
	cfg   config.EtcdDiscovery
	retry discovery.Backoff
	log   *slog.Logger
	// warned remembers, per key, the revision whose problem was logged, so a bad value is
	// logged once, not at every change of the prefix.
	warned map[string]int64
	// parsed holds each key's value as last parsed, by its revision: a change to the prefix
	// parses only the keys it changed, whatever the number of registrations.
	parsed map[string]parsedValue
}

// parsedValue is one key's value parsed at a revision.
type parsedValue struct {
	rev    int64
	engine config.Engine
	err    error
}

// MaxValueBytes bounds one registration's value: 64 KiB, a hundred times what an engine entry
// takes. A larger value is left out (logged once per revision) without being parsed.
const MaxValueBytes = 64 << 10

// New returns the source of cfg; a failing etcd is retried after retryInitial, doubling up to
// retryMax.
func New(cfg config.EtcdDiscovery, retryInitial, retryMax time.Duration, log *slog.Logger) *Source {
	return &Source{cfg: cfg, retry: discovery.Backoff{Initial: retryInitial, Max: retryMax},
		log: log.With("source", "etcd", "prefix", cfg.Prefix), warned: map[string]int64{}, parsed: map[string]parsedValue{}}
}

// Name is "etcd <prefix>".
func (s *Source) Name() string { return "etcd " + s.cfg.Prefix }

// Run reports the prefix's engines until ctx ends.
func (s *Source) Run(ctx context.Context, report func(discovery.Report)) {
	report = discovery.Changes(report)
	discovery.Retry(ctx, &s.retry, s.log, report, func() error { return s.session(ctx, report) })
}

// reportEvery is how long a change waits for the changes that follow it before it is reported.
const reportEvery = 50 * time.Millisecond

// errResync says the watch cannot resume where it was; the prefix is read again.
var errResync = errors.New("watch cannot resume")

// session connects, then reads and watches the prefix until something fails or ctx ends.
func (s *Source) session(ctx context.Context, report func(discovery.Report)) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            s.cfg.Endpoints,
		DialTimeout:          s.cfg.DialTimeoutS.Duration(),
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: s.cfg.RequestTimeoutS.Duration(),
		Logger:               zap.NewNop(),
		Context:              ctx,
		// Block in New until connected, so that dial_timeout_s bounds the connection and an
		// unreachable etcd says so as such.
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
	})
	if err != nil {
		return fmt.Errorf("connect to etcd %s: %w", strings.Join(s.cfg.Endpoints, ","), err)
	}
	defer cli.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeoutS.Duration())
		resp, err := cli.Get(rctx, s.cfg.Prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			return fmt.Errorf("read %s from etcd: %w", s.cfg.Prefix, err)
		}
		keys := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			keys[string(kv.Key)] = kv
		}
		report(discovery.Report{Engines: s.engines(keys)})
		s.retry.Reset()
		err = s.watch(ctx, cli, keys, resp.Header.Revision+1, report)
		if !errors.Is(err, errResync) {
			return err
		}
		s.log.Info("etcd watch cannot resume; reading the prefix again", "err", err)
	}
}

// watch applies the prefix's changes from rev on to keys, reporting after each batch, and
// checks every check interval that etcd still answers.
func (s *Source) watch(ctx context.Context, cli *clientv3.Client, keys map[string]*mvccpb.KeyValue, rev int64, report func(discovery.Report)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Watch returns only once etcd has accepted the watch, and waits through an outage for
	// that: bound it by the request timeout. Its goroutine ends as soon as wctx does.
	opened := make(chan clientv3.WatchChan, 1)
	go func() { opened <- cli.Watch(wctx, s.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)) }()
	var events clientv3.WatchChan
	accept := time.NewTimer(s.cfg.RequestTimeoutS.Duration())
	defer accept.Stop()
	select {
	case events = <-opened:
	case <-accept.C:
		cancel()
		<-opened
		return fmt.Errorf("etcd did not accept a watch of %s within %v", s.cfg.Prefix, s.cfg.RequestTimeoutS.Duration())
	}
	check := time.NewTicker(s.cfg.CheckIntervalS.Duration())
	defer check.Stop()
	var flush <-chan time.Time // set while a change waits to be reported
	for {
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-events:
			if err := s.ended(resp, ok, rev); err != nil {
				return err
			}
			// A change is reported reportEvery after the first batch that made it, with every
			// batch that arrived meanwhile: a burst of registrations is a few fleet changes,
			// not one per key.
			if apply(keys, resp.Events, &rev) && flush == nil {
				flush = time.After(reportEvery)
			}
		case <-flush:
			flush = nil
			report(discovery.Report{Engines: s.engines(keys)})
		case <-check.C:
			rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeoutS.Duration())
			_, err := cli.Get(rctx, s.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("etcd stopped answering (a check within %v failed): %w", s.cfg.RequestTimeoutS.Duration(), err)
			}
		}
	}
}

// ended says why the watch cannot go on after resp (ok false: the channel closed), or nil.
func (s *Source) ended(resp clientv3.WatchResponse, ok bool, rev int64) error {
	switch {
	case !ok:
		return fmt.Errorf("%w: the watch of %s closed", errResync, s.cfg.Prefix)
	case resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted):
		return fmt.Errorf("%w: revision %d was compacted", errResync, rev)
	case resp.Err() != nil:
		return fmt.Errorf("watch %s: %w", s.cfg.Prefix, resp.Err())
	case resp.Canceled:
		return fmt.Errorf("%w: etcd canceled the watch of %s", errResync, s.cfg.Prefix)
	}
	return nil
}

// apply applies a watch batch to keys and moves rev past it; it reports whether it held any event.
func apply(keys map[string]*mvccpb.KeyValue, events []*clientv3.Event, rev *int64) bool {
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(keys, string(ev.Kv.Key))
		} else {
			keys[string(ev.Kv.Key)] = ev.Kv
		}
		*rev = ev.Kv.ModRevision + 1
	}
	return len(events) > 0
}

// parse is Parse of the key's value, from the cache when the key has not changed since.
func (s *Source) parse(k string, kv *mvccpb.KeyValue) (config.Engine, error) {
	if p, ok := s.parsed[k]; ok && p.rev == kv.ModRevision {
		return p.engine, p.err
	}
	var e config.Engine
	var err error
	if len(kv.Value) > MaxValueBytes {
		err = fmt.Errorf("key %s: its value of %d bytes is larger than the %d a registration may have", k, len(kv.Value), MaxValueBytes)
	} else {
		e, err = Parse(k, s.cfg.Prefix, kv.Value)
	}
	s.parsed[k] = parsedValue{rev: kv.ModRevision, engine: e, err: err}
	return e, err
}

// engines makes the set of keys into engines: each value parsed and checked, a bad one or a
// second engine of one name left out and logged once per revision of its key.
func (s *Source) engines(keys map[string]*mvccpb.KeyValue) []config.Engine {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	for k := range s.warned {
		if _, ok := keys[k]; !ok {
			delete(s.warned, k)
		}
	}
	for k := range s.parsed {
		if _, ok := keys[k]; !ok {
			delete(s.parsed, k)
		}
	}
	var out []config.Engine
	owner := map[string]string{} // engine name → key
	for _, k := range names {
		kv := keys[k]
		e, err := s.parse(k, kv)
		if err == nil {
			if first, dup := owner[e.Name]; dup {
				err = fmt.Errorf("key %s: engine name %q is already registered by key %s; this registration is ignored", k, e.Name, first)
			}
		}
		if err != nil {
			if s.warned[k] != kv.ModRevision {
				s.warned[k] = kv.ModRevision
				s.log.Warn("etcd registration left out", "key", k, "revision", kv.ModRevision, "err", err)
			}
			continue
		}
		delete(s.warned, k)
		owner[e.Name] = k
		out = append(out, e)
	}
	return out
}

// Parse reads the value of key (under prefix) as one engine: JSON or YAML in the shape of an
// entry of the configuration's engines list, every key known. Without a name, the engine is
// named after the key less the prefix. The engine is checked as the file's engines are.
func Parse(key, prefix string, value []byte) (config.Engine, error) {
	var e config.Engine
	dec := yaml.NewDecoder(bytes.NewReader(value))
	dec.KnownFields(true)
	if err := dec.Decode(&e); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the value is empty")
		}
		return config.Engine{}, fmt.Errorf("key %s: not an engine (want JSON or YAML in the shape of an engines entry, e.g. {\"url\": \"http://10.0.0.7:8000\", \"role\": \"decode\"}): %v", key, err)
	}
	if e.Name == "" {
		e.Name = strings.TrimPrefix(key, prefix)
	}
	if err := config.CheckEngine(e, nil); err != nil {
		return config.Engine{}, fmt.Errorf("key %s: %w", key, err)
	}
	return e, nil
}
