package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/loadgen"
)

// Loadgen drives the load-generator process over its stdin/stdout protocol.
type Loadgen struct {
	Proc  *Proc
	msgs  chan loadgen.Message
	watch []*Proc // processes whose death ends a wait
}

// StartLoadgen starts `<self> loadgen`, sends it the setup and waits until it is ready.
// A phase fails at once if the generator or any process in watch dies.
func StartLoadgen(env Env, setup loadgen.Setup, watch ...*Proc) (*Loadgen, error) {
	p, err := Start(Spec{Name: "loadgen", Path: env.Self, Args: []string{"loadgen"}, Log: env.Path("loadgen.log"),
		PipeStdin: true, PipeStdout: true})
	if err != nil {
		return nil, err
	}
	l := &Loadgen{Proc: p, msgs: make(chan loadgen.Message, 16), watch: append([]*Proc{p}, watch...)}
	go l.read(p.Stdout)
	if err := l.send(loadgen.Command{Op: "setup", Setup: &setup}); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	if _, err := l.wait(30*time.Second, nil); err != nil {
		p.Stop(time.Second)
		return nil, fmt.Errorf("load generator setup: %w", err)
	}
	return l, nil
}

func (l *Loadgen) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var m loadgen.Message
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				m = loadgen.Message{Type: "error", Error: fmt.Sprintf("unreadable message %.200q: %v", line, jerr)}
			}
			l.msgs <- m
		}
		if err != nil {
			close(l.msgs)
			return
		}
	}
}

func (l *Loadgen) send(c loadgen.Command) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = l.Proc.Stdin.Write(append(b, '\n'))
	return err
}

// Run runs one phase and returns its result; onEvent sees the phase's events as they come.
func (l *Loadgen) Run(p loadgen.Phase, onEvent func(loadgen.Event)) (loadgen.Result, error) {
	if err := l.send(loadgen.Command{Op: "run", Phase: &p}); err != nil {
		return loadgen.Result{}, errors.Join(fmt.Errorf("send phase %s: %w", p.Name, err), firstDeath(l.watch...))
	}
	// A phase ends by itself; the bound only catches a wedged generator.
	bound := p.Duration + p.Guard + 2*time.Minute
	if p.Mode == loadgen.Hold {
		bound = time.Duration(float64(p.Streams)/p.Rate*float64(time.Second)) + p.Guard + 2*time.Minute
	}
	m, err := l.wait(bound, onEvent)
	if err != nil {
		return loadgen.Result{}, fmt.Errorf("phase %s: %w", p.Name, err)
	}
	return *m.Result, nil
}

// wait returns the next "ready" or "result" message, passing events to onEvent.
func (l *Loadgen) wait(bound time.Duration, onEvent func(loadgen.Event)) (loadgen.Message, error) {
	timeout := time.After(bound)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-l.msgs:
			if !ok {
				return m, errors.Join(errors.New("the load generator closed its output"), firstDeath(l.watch...))
			}
			switch m.Type {
			case "event":
				if onEvent != nil && m.Event != nil {
					onEvent(*m.Event)
				}
			case "ready", "result":
				if m.Type == "result" && m.Result == nil {
					return m, errors.New("result message without a result")
				}
				return m, nil
			default:
				return m, fmt.Errorf("load generator: %s", m.Error)
			}
		case <-tick.C:
			if err := firstDeath(l.watch...); err != nil {
				return loadgen.Message{}, err
			}
		case <-timeout:
			return loadgen.Message{}, fmt.Errorf("no answer from the load generator within %s", bound)
		}
	}
}

// Close asks the generator to quit, then stops it.
func (l *Loadgen) Close() {
	_ = l.send(loadgen.Command{Op: "quit"})
	l.Proc.Stdin.Close()
	select {
	case <-l.Proc.Exited():
	case <-time.After(2 * time.Second):
	}
	l.Proc.Stop(time.Second)
}
