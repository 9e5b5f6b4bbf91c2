package tests

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/internal/testwait"
)

// The README's examples are run, not just read. A fenced block preceded by an HTML comment
// (invisible on GitHub) takes part:
//
//	<!-- readme-test: run -->       a shell block, run with `sh -ec` against a fresh `narwhal demo`
//	<!-- readme-test: reread -->    a shell block that only reads (metrics, dumps), run again until
//	                                it prints the output block after it: counters reach /metrics at
//	                                the reporter's flush, up to a second after the request
//	<!-- readme-test: output -->    what the run block before it prints
//	<!-- readme-test: demo-log -->  the line(s) the demo's access log gains while it runs
//
// Blocks without a marker (make, systemd, kubectl, a real configuration) are not run. In an
// expected block a line "…" stands for any number of lines, "…" inside a line for any text, and
// blank lines are ignored on both sides; other lines must follow one another as shown.

// readmeBlock is a fenced block of the README and the marker before it.
type readmeBlock struct {
	kind string // run, output, demo-log
	line int    // the fence's line in README.md
	text string
}

var readmeMarker = regexp.MustCompile(`^<!-- readme-test: ([a-z-]+) -->$`)

// readmeBlocks returns the marked blocks of README.md in order.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	lines := strings.Split(string(readRepoFile(t, "README.md")), "\n")
	var out []readmeBlock
	for i := 0; i < len(lines); i++ {
		m := readmeMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		switch m[1] {
		case "run", "reread", "output", "demo-log":
		default:
			t.Fatalf("README.md:%d: unknown marker %q (run, reread, output, demo-log)", i+1, m[1])
		}
		j := i + 1
		if j >= len(lines) || !strings.HasPrefix(lines[j], "```") {
			t.Fatalf("README.md:%d: the marker %q is not followed by a fenced block", i+1, m[1])
		}
		var body []string
		k := j + 1
		for ; k < len(lines) && !strings.HasPrefix(lines[k], "```"); k++ {
			body = append(body, lines[k])
		}
		if k == len(lines) {
			t.Fatalf("README.md:%d: the block never closes", j+1)
		}
		if m[1] != "run" && m[1] != "reread" && (len(out) == 0 || out[len(out)-1].kind == "demo-log" && m[1] == "output") {
			t.Fatalf("README.md:%d: an %s block must follow a run block", j+1, m[1])
		}
		out = append(out, readmeBlock{kind: m[1], line: j + 1, text: strings.Join(body, "\n")})
		i = k
	}
	return out
}

// quoteItem is one line of a quoted block: a pattern, and whether any lines may come before it.
type quoteItem struct {
	re       *regexp.Regexp
	text     string
	gapFirst bool
}

// parseQuote turns an expected block into items: gapLine says whether a line only marks an
// elision; each other line becomes a pattern in which "…" matches any text.
func parseQuote(text string, gapLine func(string) bool, exact bool) (items []quoteItem, gapAtEnd bool) {
	gap := false
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if gapLine(l) {
			gap = true
			continue
		}
		it := quoteItem{text: l, gapFirst: gap}
		if exact {
			it.text = strings.TrimSpace(l)
		} else {
			parts := strings.Split(l, "…")
			for i := range parts {
				parts[i] = regexp.QuoteMeta(parts[i])
			}
			it.re = regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		}
		items = append(items, it)
		gap = false
	}
	return items, gap
}

func (it quoteItem) matches(line string) bool {
	if it.re == nil {
		return strings.TrimSpace(line) == it.text
	}
	return it.re.MatchString(line)
}

// quoteMatches reports whether got shows the items in order: an item follows the line the
// previous one matched unless an elision comes between them. With anchored the first item is
// got's first line and, unless the quote ends with an elision, the last item its last line.
func quoteMatches(items []quoteItem, gapAtEnd bool, got []string, anchored bool) bool {
	var nonBlank []string
	for _, l := range got {
		if strings.TrimSpace(l) != "" {
			nonBlank = append(nonBlank, l)
		}
	}
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if i == len(items) {
			return !anchored || gapAtEnd || j == len(nonBlank)
		}
		if items[i].gapFirst || (i == 0 && !anchored) {
			for k := j; k < len(nonBlank); k++ {
				if items[i].matches(nonBlank[k]) && match(i+1, k+1) {
					return true
				}
			}
			return false
		}
		return j < len(nonBlank) && items[i].matches(nonBlank[j]) && match(i+1, j+1)
	}
	return len(items) > 0 && match(0, 0)
}

func ellipsisLine(l string) bool { return strings.TrimSpace(l) == "…" }

// demoProcess is a `narwhal demo` process on free ports, its access log collected.
type demoProcess struct {
	api, admin string
	mu         sync.Mutex
	log        []string
}

func (d *demoProcess) logLines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.log...)
}

func startDemo(t *testing.T, bin string) *demoProcess {
	t.Helper()
	cmd := exec.Command(bin, "demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	d := &demoProcess{}
	banner := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		inBanner := true
		for sc.Scan() {
			line := sc.Text()
			if inBanner {
				f := strings.Fields(line)
				if len(f) >= 2 && f[0] == "API" {
					d.api = strings.TrimSuffix(strings.TrimPrefix(f[1], "http://"), "/v1")
				}
				if len(f) >= 2 && f[0] == "admin" {
					d.admin = strings.SplitN(f[1], "/", 4)[2] // http://ADDR/debug/tree...
				}
				if strings.Contains(line, "Ctrl-C stops it.") {
					inBanner = false
					close(banner)
				}
				continue
			}
			d.mu.Lock()
			d.log = append(d.log, line)
			d.mu.Unlock()
		}
		cmd.Wait()
	}()
	select {
	case <-banner:
	case <-exited:
		t.Fatalf("narwhal demo exited before its banner:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("narwhal demo printed no banner within 30 s")
	}
	if d.api == "" || d.admin == "" {
		t.Fatalf("the banner named no API (%q) or admin (%q) address", d.api, d.admin)
	}
	return d
}

// TestReadmeExamplesRun runs every marked block of the README against a real `narwhal demo`
// (the built binary) on free ports, in order, as a reader pasting them would: each must exit 0,
// print what the README shows, and leave in the demo's access log the lines it shows.
func TestReadmeExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts narwhal demo")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (Debian: apt-get install curl; .ci/run does it)")
	}
	blocks := readmeBlocks(t)
	runs := 0
	for _, b := range blocks {
		if b.kind == "run" || b.kind == "reread" {
			runs++
		}
	}
	if runs < 5 {
		t.Fatalf("README.md has %d blocks marked to run; the quick start and the admin examples alone have more", runs)
	}
	bin := buildNarwhal(t)
	demo := startDemo(t, bin)
	// The blocks call ./bin/narwhal, as a reader in a checkout after make build does.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "narwhal")); err != nil {
		t.Fatal(err)
	}
	ports := strings.NewReplacer("127.0.0.1:8000", demo.api, "127.0.0.1:8001", demo.admin)

	run := func(b readmeBlock) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-ec", ports.Replace(b.text))
		cmd.Dir = dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("README.md:%d: the block failed: %v\n%s\nstderr:\n%s", b.line, err, got, stderr.String())
		}
		return string(got)
	}
	var out string
	var logFrom int
	for i, b := range blocks {
		switch b.kind {
		case "run":
			logFrom = len(demo.logLines())
			out = run(b)
		case "reread":
			logFrom = len(demo.logLines())
			if i+1 < len(blocks) && blocks[i+1].kind == "output" {
				// Run again until it prints what the README shows, for up to 10 s; the output
				// block after it checks what it printed last.
				items, gapAtEnd := parseQuote(blocks[i+1].text, ellipsisLine, false)
				testwait.Within(10*time.Second, 50*time.Millisecond, func() bool {
					out = run(b)
					return quoteMatches(items, gapAtEnd, strings.Split(out, "\n"), true)
				})
			} else {
				out = run(b)
			}
		case "output":
			items, gapAtEnd := parseQuote(b.text, ellipsisLine, false)
			if !quoteMatches(items, gapAtEnd, strings.Split(out, "\n"), true) {
				t.Errorf("README.md:%d: the block before printed\n%s\nwhich is not what the README shows:\n%s", b.line, out, b.text)
			}
		case "demo-log":
			items, gapAtEnd := parseQuote(b.text, ellipsisLine, false)
			// The access log is flushed every log.access_log_flush_s.
			testwait.UntilEvery(t, 10*time.Second, 20*time.Millisecond, func() bool {
				return quoteMatches(items, gapAtEnd, demo.logLines()[logFrom:], false)
			}, func() string {
				return fmt.Sprintf("README.md:%d: the demo's access log gained\n%s\nwhich is not what the README shows:\n%s",
					b.line, strings.Join(demo.logLines()[logFrom:], "\n"), b.text)
			})
		}
	}
}

// TestReadmeGoQuoteIsTheExample holds the README's Go API snippet to transport/example_test.go,
// the compiled example `go test` runs: every line of the snippet is a line of the example, in
// order and adjacent, except where a "// …" line marks what the quote leaves out.
func TestReadmeGoQuoteIsTheExample(t *testing.T) {
	readme := string(readRepoFile(t, "README.md"))
	section := readme[strings.Index(readme, "## Go API"):]
	start := strings.Index(section, "```go\n")
	end := strings.Index(section[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatal("the README's Go API section has no ```go block")
	}
	quote := section[start+6 : start+6+end]
	items, _ := parseQuote(quote, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "// …") }, true)
	if len(items) < 10 {
		t.Fatalf("the Go quote has %d lines", len(items))
	}
	example := strings.Split(string(readRepoFile(t, "transport/example_test.go")), "\n")
	if !quoteMatches(items, true, example, false) {
		for n := len(items); n > 0; n-- { // name the first line that does not follow
			if quoteMatches(items[:n-1], true, example, false) {
				t.Fatalf("the README's Go quote departs from transport/example_test.go at %q", items[n-1].text)
			}
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// specCitation is how a citation of the design specification the repository does not hold
// reads (its name, then a section sign), spelled so that this file does not match it.
var specCitation = regexp.MustCompile(`SPEC[ .]` + "(§|md)")

// TestDocsCiteOnlyTheRepository: every relative link in the repository's Markdown names a file
// that exists, and no file cites a specification that is not in the repository: a reader has
// only the repository, so the docs and comments say things in their own words.
func TestDocsCiteOnlyTheRepository(t *testing.T) {
	root := ".."
	skipDirs := map[string]bool{".git": true, "node_modules": true, "bin": true, "out": true}
	var checked int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md", ".go", ".py", ".yaml", ".json", ".mjs", ".service":
		default:
			if d.Name() != "Makefile" && !strings.HasPrefix(d.Name(), "Containerfile") {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for n, line := range strings.Split(string(b), "\n") {
			if specCitation.MatchString(line) {
				t.Errorf("%s:%d cites a document that is not in the repository: %s", rel, n+1, strings.TrimSpace(line))
			}
		}
		if filepath.Ext(path) != ".md" {
			return nil
		}
		checked++
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), filepath.FromSlash(target))); err != nil {
				t.Errorf("%s links to %s, which is not in the repository", rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("only %d Markdown files found", checked)
	}
}
