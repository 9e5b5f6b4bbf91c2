package harness

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/loadgen"
)

// Model is the model every simulated engine serves.
const Model = "sim-model"

// FleetOptions shape a simulated fleet (flags of `narwhal sim fleet`).
type FleetOptions struct {
	Prefill, Decode int
	TTFT, ITL       time.Duration
	// Tokens is the engines' default output length; requests' max_tokens caps it.
	Tokens int
	// Name names the process and its log (<name>.log); "" is "fleet".
	Name string
	// Args are further `narwhal sim fleet` flags (the capacity model, KV events).
	Args []string
	// Within bounds the wait for the fleet's description; 0 is 15 s.
	Within time.Duration
}

// Fleet is a running `narwhal sim fleet` process.
type Fleet struct {
	Proc    *Proc
	Engines []loadgen.Engine
}

// StartFleet starts the fleet and reads the JSON line describing its engines.
func StartFleet(env Env, o FleetOptions) (*Fleet, error) {
	name, within := o.Name, o.Within
	if name == "" {
		name = "fleet"
	}
	if within <= 0 {
		within = 15 * time.Second
	}
	args := []string{"sim", "fleet", "--prefill", strconv.Itoa(o.Prefill), "--decode", strconv.Itoa(o.Decode),
		"--ttft", o.TTFT.String(), "--itl", o.ITL.String(), "--tokens", strconv.Itoa(o.Tokens), "--model", Model}
	p, err := Start(Spec{Name: name, Path: env.Narwhal, Log: env.Path(name + ".log"), PipeStdout: true,
		Args: append(args, o.Args...)})
	if err != nil {
		return nil, err
	}
	type answer struct {
		line []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		br := bufio.NewReader(p.Stdout)
		line, err := br.ReadBytes('\n')
		got <- answer{line, err}
		_, _ = io.Copy(io.Discard, br) // nothing more is expected; never let the pipe fill
	}()
	select {
	case a := <-got:
		if a.err != nil {
			p.Stop(time.Second)
			return nil, fmt.Errorf("fleet: no description line (%v); log:\n%s", a.err, indent(p.Tail(10)))
		}
		var desc struct {
			Engines []loadgen.Engine `json:"engines"`
		}
		if err := json.Unmarshal(a.line, &desc); err != nil || len(desc.Engines) == 0 {
			p.Stop(time.Second)
			return nil, fmt.Errorf("fleet: cannot read its description %q: %v", a.line, err)
		}
		return &Fleet{Proc: p, Engines: desc.Engines}, nil
	case <-time.After(within):
		p.Stop(time.Second)
		return nil, fmt.Errorf("fleet: no description within %v; log:\n%s", within, indent(p.Tail(10)))
	}
}
