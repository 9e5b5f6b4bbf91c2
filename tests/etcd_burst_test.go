package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// A burst of etcd registrations reaches a running router: n engines (200 by default;
// NARWHAL_ETCD_REGISTRATIONS=5000 for the figure) written at once are all
// in GET /engines within 5 s of the last write, and GET /engines, asked throughout, answers 200
// every time, each answer within maxAnswer. The registrations name a port nothing listens on, as
// dead registrations do, so every engine keeps failing its join check meanwhile (a connect, not
// a producer's prefill: docs/security.md, "Discovery writers"). The default is 200 to keep the
// suite short under -race on two cores.
func TestEtcdBurstReachesTheRouterWhileEnginesAnswers(t *testing.T) {
	n := 200
	if v, ok := os.LookupEnv("NARWHAL_ETCD_REGISTRATIONS"); ok {
		n, _ = strconv.Atoi(v)
	}
	if n <= 0 {
		t.Fatal("NARWHAL_ETCD_REGISTRATIONS is not a positive count")
	}
	const (
		prefix    = "/narwhal/burst/"
		maxAnswer = 2 * time.Second
	)
	etcd := startEtcdServer(t)
	dead := "http://" + freeTCPAddr(t) // closed: nothing listens there
	h := start(t, setup{both: 1, config: func(c *config.Config) {
		c.Discovery.Etcd = &config.EtcdDiscovery{Endpoints: []string{etcd}, Prefix: prefix, DialTimeoutS: 5, RequestTimeoutS: 5, CheckIntervalS: 5}
	}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// GET /engines, asked every 20 ms from before the first write until every engine is listed.
	poll := &http.Client{Timeout: 10 * time.Second}
	stop := make(chan struct{})
	var polled sync.WaitGroup
	var mu sync.Mutex
	var answers, failures int
	var slowest time.Duration
	var failure string
	listed := 0 // engines in the last answer
	polled.Add(1)
	go func() {
		defer polled.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			began := time.Now()
			resp, err := poll.Get(h.admin + "/engines")
			took := time.Since(began)
			var engines []json.RawMessage
			ok, why := err == nil && resp.StatusCode == http.StatusOK, ""
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				ok = ok && json.Unmarshal(body, &engines) == nil
				why = fmt.Sprintf("%d %.200s", resp.StatusCode, body)
			} else {
				why = err.Error()
			}
			mu.Lock()
			if !ok && failure == "" {
				failure = why
			}
			answers++
			slowest = max(slowest, took)
			if ok {
				listed = len(engines)
			} else {
				failures++
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); polled.Wait() }()

	// The registrations go in transactions of 64 keys, 8 transactions at a time.
	began := time.Now()
	value := `{"url": "` + dead + `", "role": "decode", "models": ["m"]}`
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for first := 0; first < n; first += 64 {
		ops := make([]clientv3.Op, 0, 64)
		for i := first; i < min(first+64, n); i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sd%05d", prefix, i), value))
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Errorf("registrations from %d: %v", first, err)
			}
		}()
	}
	wg.Wait()
	written := time.Now()
	all := testwait.Within(5*time.Second, 20*time.Millisecond, func() bool { mu.Lock(); defer mu.Unlock(); return listed == n+1 })
	applied := time.Since(written)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d registrations written in %v; %d listed %v after the last write; GET /engines answered %d times, slowest %v",
		n, written.Sub(began).Round(time.Millisecond), listed-1, applied.Round(time.Millisecond), answers, slowest.Round(time.Millisecond))
	if !all {
		t.Errorf("GET /engines lists %d engines 5 s after the last of %d registrations was written", listed-1, n)
	}
	if failures > 0 || slowest > maxAnswer {
		t.Fatalf("GET /engines: %d of %d answers failed (first: %s), slowest %v (bound %v)", failures, answers, failure, slowest, maxAnswer)
	}
}
