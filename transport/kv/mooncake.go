package kv

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// Mooncake is the name of vLLM's MooncakeConnector (engines[].kv.connector: mooncake).
//
// Its shapes come from vLLM's own source: the connector
// (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py), its bootstrap
// server (mooncake_utils.py in the same directory: GET /query answers one entry per
// data-parallel rank, each with the rank's engine_id) and vLLM's proxy for it
// (examples/online_serving/disaggregated_serving/mooncake_connector/mooncake_connector_proxy.py).
// llm-d's sidecar (connector_mooncake.go in llm-d/llm-d-router) plans the legs the same way.
//
// The flow differs from NIXL's: the producer answers no descriptor the consumer needs. The
// router picks a transfer id, sends the prefill with it (the producer keeps the prompt's blocks
// under that id) and, at the same moment, the decode with the transfer id, the producer's
// bootstrap address and the engine id of the producer's data-parallel rank; the consumer asks
// the bootstrap server where that engine's workers are and pulls the blocks registered under the
// transfer id, waiting for the prefill if it has not finished. So the router must know each
// producer's engine ids before it plans an attempt: it asks the bootstrap server itself
// (bootstrap.go), keeps the answer, asks again after an attempt through that producer fails,
// and rechecks an answer it has not heard confirmed lately while the attempt planned on it runs
// (recheck.go).
const Mooncake = "mooncake"

// MooncakeBootstrapPort is where vLLM's Mooncake bootstrap server listens unless
// VLLM_MOONCAKE_BOOTSTRAP_PORT says otherwise: one server per producer, for all of its
// data-parallel ranks. It is the bootstrap address of an unpinned producer, and the one port
// its descriptor may name unless engines[].kv.allowed_ports says otherwise.
const MooncakeBootstrapPort = 8998

// mooncakeConnector plans Mooncake's concurrent legs. It holds the producers' engine ids as
// their bootstrap servers reported them.
type mooncakeConnector struct {
	ids *bootstrapCache
}

// newMooncake makes the connector with its own cache of bootstrap answers.
func newMooncake(opts ...MooncakeOption) *mooncakeConnector {
	m := &mooncakeConnector{ids: newBootstrapCache()}
	for _, o := range opts {
		o(m)
	}
	return m
}

// NewMooncake is the Mooncake connector with opts, for a registry of a program's own
// (Builtin().With(NewMooncake(...))); Builtin holds one with the defaults.
func NewMooncake(opts ...MooncakeOption) ContextPlanner { return newMooncake(opts...) }

// observe has the connector's cache report what it learns to o (Registry.ObserveBootstrap).
func (m *mooncakeConnector) observe(o BootstrapObserver) { m.ids.observe(o) }

func (*mooncakeConnector) Name() string { return Mooncake }

// Plan without a context cannot ask a bootstrap server: it plans from what is already known,
// and a producer whose engine ids are not known yet gets decode parameters without
// remote_engine_id, which Validate refuses. Run plans through PlanContext instead.
func (m *mooncakeConnector) Plan(a Attempt) Transfer {
	ids, _ := m.ids.cached(bootstrapAddr(a.Pair.Producer))
	id := ""
	if a.ProducerRank >= 0 && a.ProducerRank < len(ids) {
		id = ids[a.ProducerRank]
	}
	return m.transfer(a, id)
}

// PlanContext asks the producer's bootstrap server for its engine ids when they are not known
// (or were forgotten after a failure), then plans both legs (a producer probed with no consumer
// too: the planned decode parameters are then its handoff). A plan made from an answer under
// recheck carries the recheck (Transfer.Recheck). The address is held to the KV endpoint policy
// before anything is sent to it, so that no producer configuration can make the router itself
// connect where consumers may not.
func (m *mooncakeConnector) PlanContext(ctx context.Context, a Attempt) (Transfer, error) {
	addr := bootstrapAddr(a.Pair.Producer)
	if r := checkBootstrap(addr, a.Pair.Producer); r != nil {
		return Transfer{}, r
	}
	ids, r, err := m.ids.get(ctx, addr, a.Pair.Producer.Engine)
	if err != nil {
		return Transfer{}, err
	}
	if a.ProducerRank < 0 || a.ProducerRank >= len(ids) {
		return Transfer{}, Reject(ReasonMissingEngineIdentity, "producer %s's bootstrap server lists %d data-parallel ranks, not rank %d",
			a.Pair.Producer.Engine, len(ids), a.ProducerRank)
	}
	id := ids[a.ProducerRank]
	t := m.transfer(a, id)
	if r != nil {
		t.Recheck = IdentityCheck{r: r, rank: a.ProducerRank, id: id}
	}
	return t, nil
}

// Forget has the next attempt through a's producer ask its bootstrap server again before it is
// planned (a producer that restarted has new engine ids).
func (m *mooncakeConnector) Forget(a Attempt) { m.ids.forget(bootstrapAddr(a.Pair.Producer)) }

// transfer writes both legs' parameters in the shapes vLLM's proxy sends: the transfer id is
// "xfer-" and the attempt's backend request ID, fresh per attempt, so a retried attempt never
// meets the blocks of the one before.
func (m *mooncakeConnector) transfer(a Attempt, engineID string) Transfer {
	tid := strconv.Quote("xfer-" + a.BackendRequestID)
	prefill := make([]byte, 0, 96+len(tid))
	prefill = append(prefill, `{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":`...)
	prefill = append(append(prefill, tid...), '}')
	decode := make([]byte, 0, 160+len(tid)+len(engineID))
	decode = append(decode, `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":`...)
	decode = strconv.AppendQuote(decode, "http://"+bootstrapAddr(a.Pair.Producer))
	if engineID != "" {
		decode = append(decode, `,"remote_engine_id":`...)
		decode = strconv.AppendQuote(decode, engineID)
	}
	decode = append(append(append(decode, `,"transfer_id":`...), tid...), '}')
	return Transfer{Prefill: prefill, Decode: decode, Ranked: true, PrefillRank: a.ProducerRank, DecodeRank: a.ConsumerRank}
}

// nixlKeys belong to NIXL's descriptors; a Mooncake consumer handed one would not pull.
var nixlKeys = []string{"remote_block_ids", "remote_host", "remote_port", "remote_request_id"}

// Validate checks the decode parameters the consumer will receive: a transfer id, the engine
// identity (present, and the producer's pinned kv.engine_id or one of its ranks' ids), and a
// bootstrap address the endpoint policy allows.
func (*mooncakeConnector) Validate(d *Descriptor, pair Pair) *Rejection {
	for _, k := range nixlKeys {
		if _, ok := d.Member(k); ok {
			return Reject(ReasonConnectorMismatch, "descriptor carries %s, which belongs to nixl, not mooncake", k)
		}
	}
	if v, ok := d.Member("do_remote_prefill"); !ok || string(v) != "true" {
		return Reject(ReasonConnectorMismatch, "do_remote_prefill is not true, so the consumer would not pull the KV cache")
	}
	if v, ok := d.Member("do_remote_decode"); ok && !wire.IsNull(v) && string(v) != "false" {
		return Reject(ReasonConnectorMismatch, "do_remote_decode is %s; a consumer must not be asked to hand its KV cache on", excerpt(v))
	}
	if tid, ok := d.stringView("transfer_id"); !ok || tid == "" {
		return Reject(ReasonMissingEngineIdentity, "transfer_id is absent, empty or not a string")
	}
	if r := checkEngineID(d, pair); r != nil {
		return r
	}
	addr, ok := d.stringView("remote_bootstrap_addr")
	rest, isHTTP := strings.CutPrefix(addr, "http://")
	if !ok || !isHTTP {
		return Reject(ReasonEndpointMismatch, "remote_bootstrap_addr is not an http://host:port address")
	}
	return checkBootstrap(rest, pair.Producer)
}

// bootstrapAddr is where producer p's bootstrap server listens: its pinned kv.endpoint, or its
// own host on MooncakeBootstrapPort.
func bootstrapAddr(p Side) string {
	if p.Endpoint != "" {
		return p.Endpoint
	}
	return net.JoinHostPort(strings.Trim(p.Host, "[]"), strconv.Itoa(MooncakeBootstrapPort))
}

// checkBootstrap holds a bootstrap host:port to the KV endpoint policy, as a NIXL descriptor's
// remote_host and remote_port are held (endpoint.go).
func checkBootstrap(hostPort string, p Side) *Rejection {
	host, port, err := net.SplitHostPort(hostPort)
	n, perr := strconv.ParseInt(port, 10, 64)
	if err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
		return Reject(ReasonEndpointMismatch, "bootstrap address %s is not host:port", excerpt([]byte(hostPort)))
	}
	return checkEndpoint(host, n, p)
}

// mooncakeDefaultPorts is where an unpinned Mooncake producer's bootstrap server may be.
var mooncakeDefaultPorts = []PortRange{{Lo: MooncakeBootstrapPort, Hi: MooncakeBootstrapPort}}

// defaultPorts are the allowed ports of a side that configures none, by its connector.
func defaultPorts(connector string) []PortRange {
	if connector == Mooncake {
		return mooncakeDefaultPorts
	}
	return DefaultAllowedPorts
}
