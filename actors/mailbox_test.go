package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// recorder is an actor that records what it receives and panics on "boom".
type recorder struct {
	mu   sync.Mutex
	got  []any
	stop chan struct{}
}

func (a *recorder) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.add("started")
		ctx.Send(ctx.Self(), "from-self") // posted while the mailbox runs: taken by the same run
	case *actor.Stopped:
		a.add("stopped")
		close(a.stop)
	case string:
		a.add(m)
		if m == "boom" {
			panic("boom")
		}
	}
}

func (a *recorder) add(v any) { a.mu.Lock(); a.got = append(a.got, v); a.mu.Unlock() }

func spawnRecorder(t testing.TB, mailbox ...actor.PropsOption) (*actor.RootContext, *actor.PID, *recorder) {
	sys := actor.NewActorSystem()
	root := sys.Root.Copy().WithGuardian(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective }))
	rec := &recorder{stop: make(chan struct{})}
	pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return rec }, append([]actor.PropsOption{inline}, mailbox...)...))
	return root, pid, rec
}

// The request supervisor's mailbox keeps protoactor's semantics: in order, messages an actor
// sends itself included, from several goroutines at once, and a panic stops the actor (its
// supervisor's directive) with Stopped delivered.
func TestInlineMailboxDeliversInOrderAndEscalatesPanics(t *testing.T) {
	root, pid, rec := spawnRecorder(t, inlineMailboxes)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				root.Send(pid, "m")
			}
		}()
	}
	wg.Wait()
	root.Send(pid, "boom")
	root.Send(pid, "after-boom") // never delivered: the actor stops
	select {
	case <-rec.stop:
	case <-time.After(5 * time.Second):
		t.Fatal("the actor never stopped after its panic")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) < 4 || rec.got[0] != "started" || rec.got[1] != "from-self" {
		t.Fatalf("first messages %v, want started then from-self", rec.got[:min(4, len(rec.got))])
	}
	n := 0
	for _, m := range rec.got {
		if m == "m" {
			n++
		}
		if m == "after-boom" {
			t.Fatal("a message after the panic reached the stopped actor")
		}
	}
	if n != 1000 || rec.got[len(rec.got)-2] != "boom" || rec.got[len(rec.got)-1] != "stopped" {
		t.Fatalf("%d of 1000 messages, last two %v", n, rec.got[len(rec.got)-2:])
	}
}

// One actor per request, spawned, sent a message and stopped: the inline mailbox saves
// allocations over protoactor's default (an allocation budget, issue #17).
func TestInlineMailboxAllocatesLess(t *testing.T) {
	cycle := func(opts ...actor.PropsOption) float64 {
		sys := actor.NewActorSystem()
		props := actor.PropsFromProducer(func() actor.Actor { return &nop{} }, append([]actor.PropsOption{inline}, opts...)...)
		return testing.AllocsPerRun(200, func() {
			pid := sys.Root.Spawn(props)
			sys.Root.Send(pid, "m")
			sys.Root.Stop(pid)
		})
	}
	def, in := cycle(), cycle(inlineMailboxes)
	t.Logf("allocations per actor life: default mailbox %.0f, inline %.0f", def, in)
	if in > def-4 {
		t.Fatalf("inline mailbox: %.0f allocations per actor life, default %.0f: want at least 4 fewer", in, def)
	}
}

type nop struct{}

func (nop) Receive(actor.Context) {}
