// Command bench is Narwhal's benchmark harness (`make bench`, or
// `go run ./bench/cmd/bench [-scenarios overhead,faults] [-baseline older-narwhal]`). It runs
// each scenario against a simulated fleet, the built router (bin/narwhal) and a load
// generator, each in its own process, prints a readable report and ends with one JSON line of
// the headline figures. -baseline adds a second router build to the overhead scenario as an
// A/B arm measured in the same windows.
// See bench/README.md.
//
// `bench loadgen` is the load generator's own mode: the harness starts this same binary that
// way and drives it over stdin/stdout. `bench peer` is the peer arm's proxy (bench/peer), run
// as its own process so that its CPU is sampled like the router's.
package main

import (
	"debug/buildinfo"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/peer"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/scenarios"
	"github.com/narwhal-router/narwhal/bench/trace"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "loadgen" {
		if err := loadgen.Serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "peer" {
		os.Exit(runPeer(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	list := flag.String("scenarios", os.Getenv("BENCH_SCENARIOS"), "comma-separated scenarios to run (default: all: overhead, saturation, streams, faults)")
	narwhal := flag.String("narwhal", "bin/narwhal", "the router binary (make build puts it there)")
	baseline := flag.String("baseline", os.Getenv("BENCH_BASELINE"), "a second router binary, e.g. built from an older commit, run by the overhead scenario as a fourth arm beside -narwhal (A/B in the same windows)")
	traced := flag.Bool("traced", os.Getenv("BENCH_TRACED") != "", "run -narwhal itself as the overhead scenario's baseline arm with tracing on (every request exported over OTLP/HTTP to a sink in the bench): the cost of tracing, off against on, in the same windows (BENCH_TRACED=1)")
	out := flag.String("out", "bench/out", "directory for logs, generated configurations and profiles")
	profile := flag.Bool("profile", true, "capture router CPU/heap profiles in extra windows (figures are measured without them)")
	quick := flag.Bool("quick", false, "shorten every window (a smoke run; figures are rough)")
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
	tracePath := flag.String("trace", trace.DefaultPath, "the Mooncake-format trace the fleet and goodput scenarios replay, plain or gzip-compressed (skipped when absent)")
	sloTTFT := flag.Duration("slo-ttft", 0, "goodput scenario: the time-to-first-token SLO (0: derived from the simulator's calibration, see bench/README.md)")
	sloTPOT := flag.Duration("slo-tpot", 0, "goodput scenario: the time-per-output-token SLO (0: derived from the simulator's calibration)")
	var rates []float64
	flag.Func("goodput-rates", "goodput scenario: comma-separated offered rates in requests/s (default: its own sweep)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || r <= 0 {
				return fmt.Errorf("rate %q: want a positive number", f)
			}
			rates = append(rates, r)
		}
		return nil
	})
	var policies, workloads []string
	flag.Func("goodput-workloads", "goodput scenario: comma-separated workloads (trace, no_sharing, overflow: the trace with caches a quarter of its working set, groups and groups_overflow: 16 shared 1,920-token prefixes; default: trace,no_sharing)", func(v string) error {
		for _, k := range strings.Split(v, ",") {
			workloads = append(workloads, strings.TrimSpace(k))
		}
		return nil
	})
	flag.Func("goodput-policies", "goodput scenario: comma-separated arms to run (auto, auto-fixed, auto-events, auto-tokens, auto-none, pd, local; default: all but auto-tokens and auto-none)", func(v string) error {
		for _, k := range strings.Split(v, ",") {
			policies = append(policies, strings.TrimSpace(k))
		}
		return nil
	})
	var routerEnv []string
	flag.Func("router-env", "NAME=VALUE added to the router's environment, repeatable (experiments: GOGC=50)", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		routerEnv = append(routerEnv, v)
		return nil
	})
	flag.Parse()

	selected, err := scenarios.Select(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	bin, err := filepath.Abs(*narwhal)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: no router binary at %s (run `make build` first): %v\n", *narwhal, err)
		return 2
	}
	var baseBin string
	if *traced {
		if *baseline != "" {
			fmt.Fprintln(os.Stderr, "bench: -traced runs -narwhal as the baseline arm with tracing on; it cannot be combined with -baseline")
			return 2
		}
		*baseline = *narwhal
	}
	if *baseline != "" {
		if baseBin, err = filepath.Abs(*baseline); err == nil {
			_, err = os.Stat(baseBin)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: no baseline router binary at %s: %v\n", *baseline, err)
			return 2
		}
		if !slices.ContainsFunc(selected, func(s scenarios.Scenario) bool { return s.Name == "overhead" }) {
			fmt.Fprintln(os.Stderr, "bench: warning: -baseline is measured by the overhead scenario only, which is not selected")
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: cannot find my own binary:", err)
		return 2
	}
	if limit, err := harness.RaiseFileLimit(scenarios.FileLimit); limit < scenarios.FileLimit {
		fmt.Fprintf(os.Stderr, "bench: warning: the file descriptor limit is %d and cannot be raised to %d here (%v);\n"+
			"the streams scenario will hold fewer streams\n", limit, scenarios.FileLimit, errOr(err, "the hard limit needs CAP_SYS_RESOURCE"))
	}

	// Children die with us: on a signal, kill every process group we started.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "\nbench: %s: stopping every child process\n", s)
		harness.KillAll()
		os.Exit(130)
	}()
	defer harness.KillAll()

	start, rev := time.Now(), commit() // the commit bin/narwhal was built from, as of now
	fmt.Printf("Narwhal benchmark — %s, %s, %d CPUs, commit %s\n", start.Format(time.RFC3339), runtime.Version(), runtime.NumCPU(), rev)
	fmt.Printf("router %s · fleet `narwhal sim fleet` · load generator `bench loadgen` (fasthttp), each its own process, on loopback\n", *narwhal)
	baseRev := binaryCommit(baseBin)
	if baseBin != "" {
		built := ""
		if baseRev != "" {
			built = " (commit " + baseRev + ")"
		}
		if *traced {
			fmt.Printf("baseline router %s%s beside it in the overhead scenario: the same binary and configuration with tracing on\n", *baseline, built)
		} else {
			fmt.Printf("baseline router %s%s beside it in the overhead scenario: the same configuration, its own process\n", *baseline, built)
		}
	}
	if len(routerEnv) > 0 {
		fmt.Printf("router environment: %s\n", strings.Join(routerEnv, " "))
	}
	fmt.Println()

	var sections []*report.Section
	failed := 0
	for _, sc := range selected {
		dir := filepath.Join(*out, sc.Name)
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		env := harness.Env{Narwhal: bin, Baseline: baseBin, BaselineTraced: *traced, Self: self, Dir: dir, Profile: *profile, Quick: *quick, RouterEnv: routerEnv, Trace: *tracePath,
			SLOTTFT: *sloTTFT, SLOTPOT: *sloTPOT, Rates: rates, Policies: policies, Workloads: workloads}
		harness.Logf("scenario %s: starting (logs in %s)", sc.Name, dir)
		t0, load0 := time.Now(), scenarios.LoadAverage()
		sec, err := sc.Run(env)
		harness.KillAll() // nothing of a scenario outlives it, even on error
		if err != nil {
			failed++
			fmt.Printf("== %s: FAILED after %s ==\n%v\n\n", sc.Name, time.Since(t0).Round(time.Second), err)
			continue
		}
		sec.Printf("(%s; load average %s before, %s after: above ~2 on 2 CPUs, neighbours shared the machine)",
			time.Since(t0).Round(time.Second), load0, scenarios.LoadAverage())
		fmt.Println(sec.Text())
		sections = append(sections, sec)
	}

	wall := time.Since(start)
	fmt.Println("== targets ==")
	fmt.Print(report.Targets(sections))
	fmt.Printf("wall time %s\n\n", wall.Round(time.Second))
	names := make([]string, len(selected))
	for i, s := range selected {
		names[i] = s.Name
	}
	meta := map[string]any{
		"scenarios": names, "failed_scenarios": failed, "wall_s": report.Round(wall.Seconds(), 1),
		"go": runtime.Version(), "cpus": runtime.NumCPU(), "commit": rev, "router_env": routerEnv,
	}
	if baseBin != "" {
		meta["baseline"] = *baseline
	}
	if baseRev != "" {
		meta["baseline_commit"] = baseRev
	}
	line, err := report.JSONLine(sections, meta)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Println(string(line))
	if failed > 0 {
		return 1
	}
	if *strict {
		for _, s := range sections {
			for _, t := range s.Targets {
				if !t.Met() {
					return 1
				}
			}
		}
	}
	return 0
}

// commit names the checked-out commit, "+dirty" with local changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}

// binaryCommit names the commit a Go binary was built from, "+dirty" with local changes, as
// its build information records it: go build stamps it in a git checkout unless
// -buildvcs=false. "" when it is not recorded (or path is "").
func binaryCommit(path string) string {
	if path == "" {
		return ""
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value[:min(len(s.Value), 7)]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

func errOr(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// runPeer is `bench peer -listen ADDR -engines JSON`.
func runPeer(args []string) int {
	fs := flag.NewFlagSet("peer", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	engines := fs.String("engines", "", `the fleet as JSON: [{"role":"prefill","url":"http://…"},…]`)
	_ = fs.Parse(args)
	var es []peer.Engine
	if err := json.Unmarshal([]byte(*engines), &es); err != nil {
		fmt.Fprintln(os.Stderr, "peer: -engines:", err)
		return 2
	}
	err := peer.Serve(*listen, es, func(addr string) { fmt.Fprintln(os.Stderr, "peer: listening on", addr) })
	fmt.Fprintln(os.Stderr, "peer:", err)
	return 1
}
