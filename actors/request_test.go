package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/ingress"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// A request supervisor that crashes is stopped, not restarted: the client gets a 500, every
// reservation it held is released and its running leg is cancelled (the engine sees the abort).
func TestCrashedRequestSupervisorAnswersAndReleasesEverything(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	cfg := config.Default()
	cfg.Disaggregation.Policy = config.DisaggAlways // the prompts are short: they would decode alone
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()),
			Models: e.Models(), KV: config.KV{Connector: "nixl", Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
	}
	r, err := NewRouter(cfg, provision(t, cfg), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitAdmitted(t, r)
	fleet.Engine("p0").InjectFault("prefill.hang_headers", 1)

	body, _ := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"sim-model","prompt":"x"}`))
	x := ingress.NewExchange("crash-1", body, time.Now(), time.Now().Add(time.Minute))
	r.Dispatch(x)
	// The test plays ingress: it runs the planned attempt, which hangs in the prefill.
	cmd := x.Await()
	if cmd.Attempt == nil {
		t.Fatalf("first command %+v, want an attempt", cmd)
	}
	outcome := make(chan transport.Outcome, 1)
	go func() { outcome <- x.Run(cmd.Attempt) }()
	waitFor(t, "the prefill never started", func() bool { return fleet.Engine("p0").Stats().InFlight != 0 })

	r.root.Send(x.Handle.(*actor.PID), (*ingress.AttemptEnded)(nil)) // malformed: the supervisor panics

	out := <-outcome
	if out.Fault == nil {
		t.Fatalf("the running attempt was not cancelled: %+v", out)
	}
	r.AttemptEnded(x, cmd.Attempt.Report(&out)) // to the stopped supervisor: a dead letter
	if cmd := x.Await(); cmd.Attempt != nil || cmd.Answer.Status != 500 {
		t.Fatalf("answer %+v, want 500", cmd)
	}
	waitFor(t, "the running prefill leg was not cancelled", func() bool { return fleet.Engine("p0").Stats().Aborted == 1 })
	held := 0
	waitWithin(t, 3*time.Second, func() string {
		return fmt.Sprintf("after the crash: %d reservations held, %d live requests", held, r.InFlight())
	}, func() bool {
		es, err := r.Engines(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = 0
		for _, e := range es {
			held += e.Reserved.Prefill + e.Reserved.Decode
		}
		return held == 0 && r.InFlight() == 0
	})
}

// A crashed supervisor's slots go back like any other's: a request queued for them is woken at
// once, not left waiting for its queue timeout.
func TestCrashedRequestSupervisorWakesTheQueue(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	cfg := config.Default()
	cfg.Disaggregation.Policy = config.DisaggAlways // the prompts are short: they would decode alone
	cfg.Admission.QueueTimeoutS = 30
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()),
			Models: e.Models(), MaxInflight: 1, KV: config.KV{Connector: "nixl", Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
	}
	r, err := NewRouter(cfg, provision(t, cfg), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitAdmitted(t, r)
	fleet.Engine("p0").InjectFault("prefill.hang_headers", 1)

	body := func() *wire.ClientBody {
		b, _ := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"sim-model","prompt":"x"}`))
		return b
	}
	first := ingress.NewExchange("crash-q-1", body(), time.Now(), time.Now().Add(time.Minute))
	r.Dispatch(first)
	cmd := first.Await()
	if cmd.Attempt == nil {
		t.Fatalf("first command %+v, want an attempt", cmd)
	}
	ran := make(chan transport.Outcome, 1)
	go func() { ran <- first.Run(cmd.Attempt) }()

	second := ingress.NewExchange("crash-q-2", body(), time.Now(), time.Now().Add(time.Minute))
	r.Dispatch(second)
	waitWithin(t, 5*time.Second, func() string { return "the second request never queued" }, func() bool { return r.env.queued.Load() == 1 })

	r.root.Send(first.Handle.(*actor.PID), (*ingress.AttemptEnded)(nil)) // malformed: the supervisor panics
	<-ran
	got := make(chan ingress.Command, 1)
	go func() { got <- second.Await() }()
	select {
	case c := <-got:
		if c.Attempt == nil {
			t.Fatalf("the queued request was answered %+v, want an attempt", c.Answer)
		}
		second.Abort(errors.New("test over"))
		second.Run(c.Attempt)
	case <-time.After(5 * time.Second):
		t.Fatal("the queued request was not woken by the crashed supervisor's released slots")
	}
}
