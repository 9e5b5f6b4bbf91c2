// Command testreport is how `make test` reads its own results, so that its summary says what
// ran and what did not.
//
//	go test -json ./... | testreport go -skips FILE
//
// prints what a plain `go test ./...` prints (a line per package, the output of every failed
// test, build errors, a package's panic or timeout), then a count of passed, failed and skipped
// tests with every skip and its reason, and writes the skips to FILE, one "name<TAB>reason" a
// line. It exits 1 when a test or a package failed, or when it saw no package at all.
//
//	testreport summary [-allow-missing] FILE...
//
// reads such files (python/tests/run.py writes the same format) and prints "N skipped: ..." with
// every name. A skip whose reason says that something "is not installed" is a component the
// test needed and did not find; `.ci/run` installs every such component, so the summary fails
// naming those tests, unless -allow-missing (make test ALLOW_MISSING=1) is given for a machine
// that cannot have them. Any other skip (one CPU, a kernel behaviour, the race detector) is
// counted and listed, not failed.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport go -skips FILE < go-test.json | testreport summary [-allow-missing] FILE...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "go":
		fs := flag.NewFlagSet("go", flag.ExitOnError)
		skips := fs.String("skips", "", "write the skipped tests here, one name<TAB>reason a line")
		fs.Parse(os.Args[2:])
		err = reportGo(os.Stdin, os.Stdout, *skips)
	case "summary":
		fs := flag.NewFlagSet("summary", flag.ExitOnError)
		allow := fs.Bool("allow-missing", false, "list skips for missing components without failing")
		fs.Parse(os.Args[2:])
		err = summarize(fs.Args(), os.Stdout, *allow)
	default:
		err = fmt.Errorf("unknown mode %q: want go or summary", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

// Skip is a test that did not run, and why.
type Skip struct {
	Name, Reason string
}

const module = "github.com/narwhal-router/narwhal"

// shortName names a test the way the repository does: its package directory and its name.
func shortName(pkg, test string) string {
	dir := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	if dir == "" {
		dir = "."
	}
	return dir + " " + test
}

// reportGo filters a `go test -json` stream into what a person reads, and writes the skips.
func reportGo(in io.Reader, out io.Writer, skipsFile string) error {
	type key struct{ pkg, test string }
	own := map[key][]string{}        // each test's own output lines
	failedSubs := map[key][]string{} // a top-level test's failed subtests, their blocks in order
	pkgOut := map[string][]string{}  // output outside any test
	var skips []Skip
	var passed, failed, packages int
	var failedPkgs []string

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || (ev.Action == "" && ev.ImportPath == "") {
			fmt.Fprintf(out, "%s\n", line) // not an event (go test's own complaint): pass it on
			continue
		}
		top := key{ev.Package, strings.SplitN(ev.Test, "/", 2)[0]}
		k := key{ev.Package, ev.Test}
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(out, ev.Output)
		case ev.Action == "output" && ev.Test == "":
			pkgOut[ev.Package] = append(pkgOut[ev.Package], ev.Output)
		case ev.Action == "output":
			own[k] = append(own[k], ev.Output)
		case ev.Test != "" && ev.Action == "pass":
			passed++
		case ev.Test != "" && ev.Action == "skip":
			skips = append(skips, Skip{shortName(ev.Package, ev.Test), skipReason(own[k])})
		case ev.Test != "" && ev.Action == "fail":
			failed++
			if ev.Test != top.test {
				failedSubs[top] = append(failedSubs[top], failureBlock(own[k]))
				break
			}
			fmt.Fprint(out, failureBlock(own[k])+strings.Join(failedSubs[top], ""))
		case ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			packages++
			lines := pkgOut[ev.Package]
			if ev.Action == "fail" {
				failedPkgs = append(failedPkgs, ev.Package)
				fmt.Fprint(out, strings.Join(lines, "")) // a panic, a timeout, a leak check, the FAIL line
			} else if len(lines) > 0 {
				fmt.Fprint(out, lines[len(lines)-1]) // "ok  pkg 1.2s" or "?  pkg [no test files]"
			}
			delete(pkgOut, ev.Package)
		}
		if ev.Test != "" && (ev.Action == "pass" || ev.Action == "skip" || ev.Action == "fail") {
			delete(own, k)
			if ev.Test == top.test {
				delete(failedSubs, top)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading go test's output: %w", err)
	}
	fmt.Fprintf(out, "go test: %d packages, %d tests passed, %d failed, %d skipped\n", packages, passed, failed, len(skips))
	for _, s := range skips {
		fmt.Fprintf(out, "  skipped: %s: %s\n", s.Name, s.Reason)
	}
	if skipsFile != "" {
		if err := writeSkips(skipsFile, skips); err != nil {
			return err
		}
	}
	switch {
	case packages == 0:
		return errors.New("go test reported no package")
	case failed > 0 || len(failedPkgs) > 0:
		return fmt.Errorf("%d tests failed, in %d packages", failed, len(failedPkgs))
	}
	return nil
}

// failureBlock is a failed test's output as a plain `go test` shows it: its "--- FAIL" line
// first, then what it logged (test2json gives the log lines before the verdict).
func failureBlock(lines []string) string {
	var head, body []string
	for _, l := range lines {
		switch t := strings.TrimSpace(l); {
		case strings.HasPrefix(t, "=== "):
		case strings.HasPrefix(t, "--- "):
			head = append(head, l)
		default:
			body = append(body, l)
		}
	}
	return strings.Join(head, "") + strings.Join(body, "")
}

// skipReason is what a skipped test said: its log lines without the file:line prefix and
// without the framework's "=== RUN" and "--- SKIP" lines.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		if loc, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(loc, ".go:") && !strings.Contains(loc, " ") {
			l = msg
		}
		parts = append(parts, l)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

func writeSkips(name string, skips []Skip) error {
	var b strings.Builder
	for _, s := range skips {
		fmt.Fprintf(&b, "%s\t%s\n", s.Name, strings.ReplaceAll(s.Reason, "\n", " "))
	}
	if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing the skips: %w", err)
	}
	return nil
}

// missingComponent reports whether a skip's reason says an outside component was not found.
func missingComponent(reason string) bool {
	return strings.Contains(reason, "is not installed") || strings.Contains(reason, "are not installed")
}

// summarize prints every skip of the files and fails on those for a missing component.
func summarize(files []string, out io.Writer, allowMissing bool) error {
	var all, missing []Skip
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // that step did not get as far as writing it; its own failure says why
		}
		if err != nil {
			return err
		}
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if line == "" {
				continue
			}
			name, reason, _ := strings.Cut(line, "\t")
			s := Skip{name, reason}
			all = append(all, s)
			if missingComponent(reason) {
				missing = append(missing, s)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	if len(all) == 0 {
		fmt.Fprintln(out, "0 skipped")
		return nil
	}
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.Name
	}
	fmt.Fprintf(out, "%d skipped: %s\n", len(all), strings.Join(names, ", "))
	for _, s := range all {
		fmt.Fprintf(out, "  %s: %s\n", s.Name, s.Reason)
	}
	if len(missing) == 0 {
		return nil
	}
	msg := make([]string, len(missing))
	for i, s := range missing {
		msg[i] = s.Name
	}
	if allowMissing {
		fmt.Fprintf(out, "%d skipped for a missing component (allowed by ALLOW_MISSING): %s\n", len(missing), strings.Join(msg, ", "))
		return nil
	}
	return fmt.Errorf("%d tests skipped for a component that is not installed (.ci/run installs them all; ALLOW_MISSING=1 accepts it): %s",
		len(missing), strings.Join(msg, ", "))
}
