package harness

import (
	"fmt"
	"net"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/peer"
)

// Peer is a running `bench peer`: the plain net/http prefill/decode proxy (bench/peer) the
// router is compared with, in front of the same fleet.
type Peer struct {
	Proc *Proc
	Addr string
}

// StartPeer starts `<self> peer` on a free loopback port and returns once it accepts.
func StartPeer(env Env, engines []loadgen.Engine) (*Peer, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	es := make([]peer.Engine, len(engines))
	for i, e := range engines {
		es[i] = peer.Engine{Role: e.Role, URL: e.URL}
	}
	list, err := json.Marshal(es)
	if err != nil {
		return nil, err
	}
	p, err := Start(Spec{Name: "peer", Path: env.Self, Args: []string{"peer", "-listen", addr, "-engines", string(list)},
		Log: env.Path("peer.log"), Env: env.RouterEnv})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := p.Died(); err != nil {
			return nil, err
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return &Peer{Proc: p, Addr: addr}, nil
		}
		if time.Now().After(deadline) {
			p.Stop(time.Second)
			return nil, fmt.Errorf("peer not listening within 15 s; log:\n%s", indent(p.Tail(15)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
