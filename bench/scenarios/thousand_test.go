package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
)

// narwhalBinary is bin/narwhal for the scenarios that run the router and the simulator as
// processes, built once per test binary into a directory TestMain does not own: the test
// that first asks removes nothing, the OS's temporary directory does.
var narwhalBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "narwhal-scenarios-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "narwhal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/narwhal-router/narwhal").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func processEnv(t *testing.T) harness.Env {
	t.Helper()
	bin, err := narwhalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return harness.Env{Narwhal: bin, Dir: t.TempDir()}
}

// The thousand scenario, run with 20 engines: every router starts with every engine joined,
// the scraping routers scrape, the events router applies batches under the light load, and
// the load is served.
func TestThousandRunsSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet and five routers")
	}
	env := processEnv(t)
	size := thousandSize{producers: 5, consumers: 15, window: time.Second, rounds: 1, intervals: []float64{0.25},
		rate: 10, loadWindows: 2, startWithin: time.Minute}
	sec, err := runThousand(env, size)
	if err != nil {
		t.Fatal(err)
	}
	text := sec.Text()
	if n := sec.Figures["engines"]; n != 20 {
		t.Errorf("engines %v, want 20", n)
	}
	// Set only when the router scraped in the idle window.
	if _, ok := sec.Figures["scrape_0_25s_us_per_scrape"]; !ok {
		t.Errorf("the scraping router scraped nothing:\n%s", text)
	}
	for _, k := range []string{"load_off_ok", "load_events_ok"} {
		if sec.Figures[k] == 0 {
			t.Errorf("%s: nothing served:\n%s", k, text)
		}
	}
	for _, k := range []string{"load_off_failed", "load_events_failed"} {
		if sec.Figures[k] != 0 {
			t.Errorf("%s: %v failed:\n%s", k, sec.Figures[k], text)
		}
	}
	if !strings.Contains(text, "ingests") {
		t.Errorf("no KV event ingestion figure:\n%s", text)
	}
}
