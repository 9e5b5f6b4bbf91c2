package telemetry

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cactus/go-statsd-client/v5/statsd"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"

	"github.com/narwhal-router/narwhal/buildinfo"
	"github.com/narwhal-router/narwhal/config"
)

// Reporting is the tally root scope wired to Narwhal's reporters: Prometheus (always, served on
// the admin listener's /metrics) and statsd (when metrics.statsd is configured).
type Reporting struct {
	Metrics *Metrics
	// Prometheus serves the scrape endpoint.
	Prometheus http.Handler

	closer  io.Closer
	statter statsd.Statter
	flushes *atomic.Uint64 // reports done (fanout.flushes)
}

// PrometheusPrefix starts every Prometheus metric name.
const PrometheusPrefix = "narwhal_"

// Metric kinds, for PrometheusName.
const (
	KindCounter   = "counter"
	KindGauge     = "gauge"
	KindTimer     = "timer"
	KindHistogram = "histogram"
)

// PrometheusName is the Prometheus name of the catalog metric name of kind, following the
// Prometheus naming conventions: the narwhal_ prefix, durations in seconds named _seconds (the
// catalog's _s), counters ending in _total. For example requests is narwhal_requests_total and
// ttft_s is narwhal_ttft_seconds. statsd keeps the catalog name itself (StatsdName), so the
// two stay derivable from one another and neither changes with a library upgrade. A histogram
// of something other than time (cached_tokens_error, in tokens) keeps its name.
func PrometheusName(name, kind string) string {
	if kind == KindTimer || (kind == KindHistogram && strings.HasSuffix(name, "_s")) {
		name = strings.TrimSuffix(name, "_s") + "_seconds"
	}
	if kind == KindCounter {
		name += "_total"
	}
	return PrometheusPrefix + name
}

// sanitizeOptions keep Prometheus's rules for metric names and label names, and every printable
// ASCII character in label values: a model (meta-llama/Llama-3.1-8B-Instruct), an engine name
// (prefill-0) or a version (v1.2.3-dirty) reads on /metrics as configured (the Prometheus client
// escapes quotes and backslashes). statsd flattens values into names with its own, stricter
// rule (StatsdName).
var sanitizeOptions = tally.SanitizeOptions{
	NameCharacters:       tallyprom.DefaultSanitizerOpts.NameCharacters,
	KeyCharacters:        tallyprom.DefaultSanitizerOpts.KeyCharacters,
	ValueCharacters:      tally.ValidCharacters{Ranges: []tally.SanitizeRange{{' ', '~'}}},
	ReplacementCharacter: tally.DefaultReplacementCharacter,
}

// secondsBuckets are the Prometheus buckets for latency timers, in seconds.
var secondsBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// NewReporting starts the root scope. Counters, gauges and histograms are reported every
// flush interval (metrics.statsd.flush_interval_s, else 1 s); timers are sent at once.
func NewReporting(cfg config.Metrics) (*Reporting, error) { return newReporting(cfg, time.Second) }

// newReporting is NewReporting with the flush interval used when statsd is off.
func newReporting(cfg config.Metrics, interval time.Duration) (*Reporting, error) {
	reg := prom.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pr := tallyprom.NewReporter(tallyprom.Options{
		Registerer:              reg,
		Gatherer:                reg,
		DefaultTimerType:        tallyprom.HistogramTimerType,
		DefaultHistogramBuckets: secondsBuckets,
		OnRegisterError:         func(error) {}, // one name, one tag-key set: enforced by Metrics
	})
	rep := newFanout(pr)
	if s := cfg.Statsd; s != nil {
		statter, err := statsd.NewClientWithConfig(&statsd.ClientConfig{
			Address: s.Address, Prefix: s.Prefix, UseBuffered: true, FlushInterval: s.FlushIntervalS.Duration(),
		})
		if err != nil {
			return nil, fmt.Errorf("statsd %s: %w", s.Address, err)
		}
		rep.statter = statter
		interval = s.FlushIntervalS.Duration()
	}
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  rep,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sanitizeOptions,
		// tally's own cardinality gauges carry the library version in their names: a dashboard
		// over them would break on an upgrade, and they are not Narwhal's to report.
		OmitCardinalityMetrics: true,
	}, interval)
	m := New(scope)
	m.BuildInfo(buildinfo.Get())
	m.engines = rep
	m.direct = rep
	return &Reporting{Metrics: m, Prometheus: pr.HTTPHandler(), closer: closer, statter: rep.statter, flushes: &rep.flushes}, nil
}

// Close reports what is pending and closes the statsd client.
func (r *Reporting) Close() error {
	err := r.closer.Close()
	if r.statter != nil {
		if cerr := r.statter.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// fanout is a tally cached reporter that feeds both Prometheus (with tags as labels) and statsd
// (which has no tags: they are flattened into the name once, when the instrument is made).
//
// The counters and gauges of one engine (tagged engine or producer) can be forgotten when the
// engine leaves the fleet: their Prometheus series are deleted, and what tally still reports
// for them (a gauge set while the engine drained is reported at the next flush, and a closed
// scope once more) is dropped, to Prometheus and statsd alike, until an engine of that name is
// added again or two reports have run. Such an instrument looks its Prometheus series up at each
// report (once per flush, not per request), so a series deleted and wanted again is made afresh,
// starting at 0.
type fanout struct {
	prom    tallyprom.Reporter
	statter statsd.Statter // nil: statsd off

	flushes atomic.Uint64 // reports done

	mu sync.RWMutex
	// forgotten is the engine names whose series are gone, each with the number of reports done
	// when it was forgotten. A name is kept until two more reports have run: by then tally has
	// reported the engine's closed scopes a last time (dropped here) and let them go, and the
	// name costs nothing more.
	forgotten map[string]uint64
	// series is, per engine name, the Prometheus series its instruments report to: forgetting
	// an engine deletes exactly those, at a cost of its own series rather than the fleet's.
	series map[string][]engineSeries
	// direct is, per engine name, its counters and gauges made outside tally (directCounter,
	// directGauge), reported at each Flush.
	direct map[string][]directInstrument
}

// engineSeries is one series of an engine: its vector and labels.
type engineSeries struct {
	vec    interface{ Delete(prom.Labels) bool }
	labels prom.Labels
}

// engineTag returns the key and value of the tag naming an engine, if any.
func engineTag(tags map[string]string) (key, engine string) {
	for _, k := range []string{"engine", "producer"} {
		if v, ok := tags[k]; ok {
			return k, v
		}
	}
	return "", ""
}

// forget deletes every series of engine and drops its reports until remember.
func (f *fanout) forget(engine string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten[engine] = f.flushes.Load()
	for _, s := range f.series[engine] {
		s.vec.Delete(s.labels)
	}
	delete(f.series, engine)
	delete(f.direct, engine)
}

// remember lets engine's series be reported again (an engine of that name joined the fleet).
func (f *fanout) remember(engine string) {
	f.mu.Lock()
	delete(f.forgotten, engine)
	f.mu.Unlock()
}

// export notes a new instrument's series under its engine and, unless the engine is forgotten,
// makes it (exported from now on, at 0, as tally's own instruments are).
func (f *fanout) export(engine string, s engineSeries, create func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.series[engine] = append(f.series[engine], s)
	if _, gone := f.forgotten[engine]; !gone {
		create()
	}
}

// StatsdName is the statsd name of a metric: the name, then each tag as ".key.value" in key
// order, values with anything but letters, digits, '_' and '-' replaced by '_'. For example
// requests{endpoint=chat,outcome=success,status=200} is requests.endpoint.chat.outcome.success.status.200
// (after the configured prefix).
func StatsdName(name string, tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		b.WriteByte('.')
		b.WriteString(statsdSafe(k))
		b.WriteByte('.')
		b.WriteString(statsdSafe(tags[k]))
	}
	return b.String()
}

func statsdSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

func (f *fanout) Capabilities() tally.Capabilities { return f }
func (f *fanout) Reporting() bool                  { return true }
func (f *fanout) Tagging() bool                    { return true }

func newFanout(pr tallyprom.Reporter) *fanout {
	return &fanout{prom: pr, forgotten: map[string]uint64{}, series: map[string][]engineSeries{}, direct: map[string][]directInstrument{}}
}

// Flush ends one report of every instrument (tally calls it after reporting its own): it
// reports the engines' direct instruments, and lets go of the names forgotten two reports ago.
func (f *fanout) Flush() {
	f.mu.RLock()
	var direct []directInstrument
	for _, in := range f.direct {
		direct = append(direct, in...)
	}
	f.mu.RUnlock()
	for _, in := range direct {
		in.report()
	}
	f.prom.Flush()
	done := f.flushes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	for engine, at := range f.forgotten {
		if done >= at+2 {
			delete(f.forgotten, engine)
		}
	}
}

type (
	count struct {
		p  tally.CachedCount
		s  statsd.Statter
		sn string
	}
	gauge struct {
		p  tally.CachedGauge
		s  statsd.Statter
		sn string
	}
	timer struct {
		p  tally.CachedTimer
		s  statsd.Statter
		sn string
	}
	histogram struct {
		p  tally.CachedHistogram
		s  statsd.Statter
		sn string
	}
	bucket struct {
		p  tally.CachedHistogramBucket
		s  statsd.Statter
		sn string
	}
)

func (f *fanout) AllocateCounter(name string, tags map[string]string) tally.CachedCount {
	pn := PrometheusName(name, KindCounter)
	if _, engine := engineTag(tags); engine != "" {
		// The description is the one tally's reporter gives the vector it registers.
		vec, err := f.prom.RegisterCounter(pn, keysOf(tags), pn+" counter")
		if err == nil {
			labels := maps.Clone(tags)
			f.export(engine, engineSeries{vec, labels}, func() { _, _ = vec.GetMetricWith(labels) })
			return &engineCount{f: f, vec: vec, labels: labels, engine: engine, s: f.statter, sn: StatsdName(name, tags)}
		}
	}
	return &count{p: f.prom.AllocateCounter(pn, tags), s: f.statter, sn: StatsdName(name, tags)}
}

func (f *fanout) AllocateGauge(name string, tags map[string]string) tally.CachedGauge {
	pn := PrometheusName(name, KindGauge)
	if _, engine := engineTag(tags); engine != "" {
		vec, err := f.prom.RegisterGauge(pn, keysOf(tags), pn+" gauge")
		if err == nil {
			labels := maps.Clone(tags)
			f.export(engine, engineSeries{vec, labels}, func() { _, _ = vec.GetMetricWith(labels) })
			return &engineGauge{f: f, vec: vec, labels: labels, engine: engine, g: gauge{s: f.statter, sn: StatsdName(name, tags)}}
		}
	}
	return &gauge{p: f.prom.AllocateGauge(pn, tags), s: f.statter, sn: StatsdName(name, tags)}
}

func keysOf(tags map[string]string) []string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// engineCount and engineGauge are the instruments of one engine: see fanout.
type (
	engineCount struct {
		f      *fanout
		vec    *prom.CounterVec
		labels prom.Labels
		engine string
		s      statsd.Statter
		sn     string
	}
	engineGauge struct {
		f      *fanout
		vec    *prom.GaugeVec
		labels prom.Labels
		engine string
		g      gauge // its statsd side (g.p unused)
	}
)

func (c *engineCount) ReportCount(v int64) {
	c.f.mu.RLock()
	defer c.f.mu.RUnlock()
	if _, gone := c.f.forgotten[c.engine]; gone {
		return
	}
	if m, err := c.vec.GetMetricWith(c.labels); err == nil {
		m.Add(float64(v))
	}
	if c.s != nil {
		_ = c.s.Inc(c.sn, v, 1)
	}
}

func (g *engineGauge) ReportGauge(v float64) {
	g.f.mu.RLock()
	defer g.f.mu.RUnlock()
	if _, gone := g.f.forgotten[g.engine]; gone {
		return
	}
	if m, err := g.vec.GetMetricWith(g.labels); err == nil {
		m.Set(v)
	}
	g.g.statsd(v)
}

func (f *fanout) AllocateTimer(name string, tags map[string]string) tally.CachedTimer {
	return &timer{p: f.prom.AllocateTimer(PrometheusName(name, KindTimer), tags), s: f.statter, sn: StatsdName(name, tags)}
}

func (f *fanout) AllocateHistogram(name string, tags map[string]string, b tally.Buckets) tally.CachedHistogram {
	return &histogram{p: f.prom.AllocateHistogram(PrometheusName(name, KindHistogram), tags, b), s: f.statter, sn: StatsdName(name, tags)}
}

func (c *count) ReportCount(v int64) {
	c.p.ReportCount(v)
	if c.s != nil {
		_ = c.s.Inc(c.sn, v, 1)
	}
}

func (g *gauge) ReportGauge(v float64) {
	g.p.ReportGauge(v)
	g.statsd(v)
}

func (g *gauge) statsd(v float64) {
	switch s := g.s.(type) {
	case nil:
	case statsd.ExtendedStatSender: // fractional gauges (kv usage, ratios) stay fractional
		_ = s.GaugeFloat(g.sn, v, 1)
	default:
		_ = s.Gauge(g.sn, int64(v), 1)
	}
}

func (t *timer) ReportTimer(d time.Duration) {
	t.p.ReportTimer(d)
	if t.s != nil {
		_ = t.s.TimingDuration(t.sn, d, 1)
	}
}

// Histogram buckets reach statsd as counters named <name>.le_<upper bound>: statsd has no
// histogram type, and cumulative-free bucket counts sum correctly over any time range.
func (h *histogram) ValueBucket(lo, hi float64) tally.CachedHistogramBucket {
	return &bucket{p: h.p.ValueBucket(lo, hi), s: h.s, sn: h.sn + ".le_" + statsdSafe(fmt.Sprintf("%g", hi))}
}

func (h *histogram) DurationBucket(lo, hi time.Duration) tally.CachedHistogramBucket {
	return &bucket{p: h.p.DurationBucket(lo, hi), s: h.s, sn: h.sn + ".le_" + statsdSafe(fmt.Sprintf("%g", hi.Seconds()))}
}

func (b *bucket) ReportSamples(v int64) {
	b.p.ReportSamples(v)
	if b.s != nil {
		_ = b.s.Inc(b.sn, v, 1)
	}
}

// An engine's counters and gauges are made here rather than in tally: tally keeps a scope, and
// its instruments, for every tag set it was ever asked for, where these are dropped with the
// engine (forget). They keep what was recorded since the last report, as tally's do, and report
// it at Flush through the same cached instruments (engineCount, engineGauge).
type (
	directInstrument interface{ report() }
	directCounter    struct {
		n   atomic.Int64
		rep tally.CachedCount
	}
	directGauge struct {
		bits atomic.Uint64
		set  atomic.Bool
		rep  tally.CachedGauge
	}
)

func (c *directCounter) Inc(n int64) { c.n.Add(n) }

func (c *directCounter) report() {
	if n := c.n.Swap(0); n != 0 {
		c.rep.ReportCount(n)
	}
}

func (g *directGauge) Update(v float64) {
	g.bits.Store(math.Float64bits(v))
	g.set.Store(true)
}

func (g *directGauge) report() {
	if g.set.Swap(false) {
		g.rep.ReportGauge(math.Float64frombits(g.bits.Load()))
	}
}

func (f *fanout) engineCounter(engine, name string, tags map[string]string) tally.Counter {
	c := &directCounter{rep: f.AllocateCounter(name, tags)}
	f.keep(engine, c)
	return c
}

func (f *fanout) engineGauge(engine, name string, tags map[string]string) tally.Gauge {
	g := &directGauge{rep: f.AllocateGauge(name, tags)}
	f.keep(engine, g)
	return g
}

// keep notes in, an instrument of engine, for Flush to report until forget.
func (f *fanout) keep(engine string, in directInstrument) {
	f.mu.Lock()
	f.direct[engine] = append(f.direct[engine], in)
	f.mu.Unlock()
}
