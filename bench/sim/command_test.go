package sim

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/spf13/pflag"
)

// runCommand runs the sim command with args until the returned stop is called, and
// returns the JSON line it printed.
func runCommand(t *testing.T, args ...string) (line string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := Command()
	pr, pw := io.Pipe()
	cmd.SetOut(pw)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("the command did not stop")
			return nil
		}
	}
	if err != nil {
		t.Fatalf("read the command's line: %v (command: %v)", err, stop())
	}
	return line, stop
}

func TestCommandRunsOneEngine(t *testing.T) {
	t.Parallel()
	line, stop := runCommand(t, "--listen", "127.0.0.1:0", "--role", "prefill", "--engine-id", "p0", "--name", "p0",
		"--model", "a,b", "--model", "c", "--ttft", "1ms", "--tokens", "3", "--kv-layout", "grouped", "--version", "0.11.0")
	var info EngineInfo
	if err := json.Unmarshal([]byte(line), &info); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	if info.Name != "p0" || info.Role != RolePrefill || info.EngineID != "p0" || !strings.HasPrefix(info.URL, "http://127.0.0.1:") ||
		!strings.HasPrefix(info.KVEndpoint, "127.0.0.1:") {
		t.Errorf("printed %s", line)
	}
	if _, _, body := get(t, info.URL+"/v1/models"); !strings.Contains(string(body), `"id":"c"`) {
		t.Errorf("/v1/models %s", body)
	}
	if _, _, body := get(t, info.URL+"/version"); string(body) != `{"version":"0.11.0"}` {
		t.Errorf("/version %s", body)
	}
	_, _, body := post(t, info.URL, "/v1/completions", strings.Replace(prefillBody("x"), "sim-model", "b", 1))
	if !strings.Contains(string(body), `"remote_block_ids":[[`) {
		t.Errorf("grouped prefill %s", body)
	}
	if err := stop(); err != nil {
		t.Errorf("command returned %v", err)
	}
}

func TestCommandRunsAFleet(t *testing.T) {
	t.Parallel()
	line, stop := runCommand(t, "fleet", "--prefill", "2", "--decode", "1", "--both", "1", "--tokens", "2", "--itl", "1ms",
		"--max-num-seqs", "3", "--kv-blocks", "300", "--block-size", "16", "--transfer-per-block", "1ms",
		"--itl-per-seq", "1ms", "--max-num-batched-tokens", "512", "--enable-prompt-tokens-details")
	var fleet struct{ Engines []EngineInfo }
	if err := json.Unmarshal([]byte(line), &fleet); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	var names []string
	urls := map[string]bool{}
	for _, e := range fleet.Engines {
		names = append(names, e.Name+"/"+string(e.Role))
		urls[e.URL], urls[e.KVEndpoint] = true, true
	}
	if strings.Join(names, " ") != "p0/prefill p1/prefill d0/decode b0/both" || len(urls) != 8 {
		t.Errorf("fleet %s", line)
	}
	// The fleet's engines really hand off.
	_, _, body := post(t, fleet.Engines[1].URL, "/v1/completions", prefillBody("x"))
	code, _, body := post(t, fleet.Engines[2].URL, "/v1/completions", withKV(t, completionsStream("x"), descriptorOf(t, body)))
	if code != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("decode through the fleet: %d %s", code, body)
	}
	// The capacity flags reached the engines.
	_, _, body = get(t, fleet.Engines[2].URL+"/sim/stats")
	var st Stats
	if err := json.Unmarshal(body, &st); err != nil || st.KVBlocks != 300 || st.PrefixCacheQueries != 1 || st.Steps == 0 {
		t.Errorf("consumer stats %s: want the capacity model on with 300 blocks", body)
	}
	if err := stop(); err != nil {
		t.Errorf("command returned %v", err)
	}
}

func TestCommandRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0", "--role", "router"},
		{"--listen", "127.0.0.1:0", "--kv-load-failure", "retry"},
		{"fleet", "--prefill", "0", "--decode", "0"},
		{"fleet", "--max-num-seqs", "4", "--kv-blocks", "16"}, // 256 tokens < max model len
	} {
		cmd := Command()
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// With the capacity model on, the step times the command line leaves out are the
// calibration's; those it sets are kept; with the model off nothing changes.
func TestCommandCalibratesTheCapacityModel(t *testing.T) {
	parse := func(args ...string) Options {
		var o Options
		fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
		addEngineFlags(fs, &o)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		calibrateUnset(fs, &o)
		return o
	}
	o := parse("--max-num-seqs", "8", "--itl", "2ms")
	if o.ITL != 2*time.Millisecond || o.ITLPerSeq != Calibrated.ITLPerSeq || o.PrefillPerToken != Calibrated.PrefillPerToken {
		t.Errorf("capacity model on: itl %v, per seq %v, per token %v", o.ITL, o.ITLPerSeq, o.PrefillPerToken)
	}
	if o := parse("--max-num-seqs", "8", "--itl-per-seq", "0"); o.ITLPerSeq != 0 || o.ITL != Calibrated.ITL {
		t.Errorf("an explicit 0 was replaced: %+v", o)
	}
	if o := parse("--itl", "1ms"); o.ITLPerSeq != 0 || o.PrefillPerToken != 0 {
		t.Errorf("capacity model off, calibrated anyway: %+v", o)
	}
}

// The command publishes KV events where --kv-events says and prints the bound endpoints.
func TestCommandPublishesKVEvents(t *testing.T) {
	line, stop := runCommand(t, "--listen", "127.0.0.1:0", "--max-num-seqs", "2",
		"--kv-events", "tcp://127.0.0.1:0", "--kv-events-replay", "tcp://127.0.0.1:0", "--kv-events-topic", "kv")
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	var info EngineInfo
	if err := json.Unmarshal([]byte(line), &info); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	if !strings.HasPrefix(info.KVEvents, "tcp://127.0.0.1:") || !strings.HasPrefix(info.KVEventsReplay, "tcp://127.0.0.1:") ||
		strings.HasSuffix(info.KVEvents, ":0") {
		t.Errorf("printed %s: want the bound KV events endpoints", line)
	}
}
