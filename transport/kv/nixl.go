package kv

import (
	"strings"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// NIXL is the name of vLLM's NixlConnector, the connector an engine uses unless it names another.
const NIXL = "nixl"

// nixlConnector is vLLM's NixlConnector (v1, v2 and the newest grouped shapes): the producer
// pins the prompt's KV blocks and the consumer pulls them from remote_host:remote_port.
type nixlConnector struct{}

var nixlPrefillParams = []byte(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// foreignKeys belong to other connectors' descriptors (Mooncake, SGLang-style bootstrap).
var foreignKeys = []string{"transfer_id", "remote_bootstrap_addr", "bootstrap_room", "bootstrap_host", "bootstrap_port"}

func (nixlConnector) Name() string { return NIXL }

// Plan asks the producer to keep the prompt's blocks for a remote decode; the consumer's
// parameters are the descriptor the producer answers with.
func (nixlConnector) Plan(Attempt) Transfer { return Transfer{Prefill: nixlPrefillParams} }

func (nixlConnector) Validate(d *Descriptor, pair Pair) *Rejection {
	for _, k := range foreignKeys {
		if _, ok := d.Member(k); ok {
			return Reject(ReasonConnectorMismatch, "descriptor carries %s, which belongs to another connector than nixl", k)
		}
	}
	if v, ok := d.Member("do_remote_prefill"); !ok || string(v) != "true" {
		return Reject(ReasonConnectorMismatch, "do_remote_prefill is not true, so the consumer would not load the KV cache")
	}
	if v, ok := d.Member("transfer_mode"); ok && !wire.IsNull(v) {
		mode, isStr := d.stringView("transfer_mode")
		if !isStr || !contains(pair.Consumer.TransferModes, mode) {
			return Reject(ReasonConnectorMismatch, "transfer_mode %s is not one consumer %s accepts (%s)",
				excerpt(v), pair.Consumer.Engine, strings.Join(pair.Consumer.TransferModes, ", "))
		}
	}

	if r := checkEngineID(d, pair); r != nil {
		return r
	}

	blocks, ok := d.Member("remote_block_ids")
	if !ok {
		return Reject(ReasonMalformedBlockIDs, "remote_block_ids is absent")
	}
	if r := checkBlockIDs(blocks); r != nil {
		return r
	}

	host, hostOK := d.stringView("remote_host")
	port, portOK := d.intMember("remote_port")
	if !hostOK || host == "" || !portOK || port < 1 || port > 65535 {
		return Reject(ReasonEndpointMismatch, "remote_host/remote_port do not name a KV endpoint (need a host string and a port 1-65535)")
	}
	if r := checkEndpoint(host, port, pair.Producer); r != nil {
		return r
	}
	// Members that would flip the consumer's side of the protocol are refused rather than
	// rewritten (the descriptor is forwarded byte for byte): do_remote_decode true would make the
	// consumer hold its blocks for a remote decode that never comes, as a producer does.
	if v, ok := d.Member("do_remote_decode"); ok && !wire.IsNull(v) && string(v) != "false" {
		return Reject(ReasonConnectorMismatch, "do_remote_decode is %s; a consumer must not be asked to hand its KV cache on", excerpt(v))
	}
	return nil
}

// checkEngineID requires the descriptor's remote_engine_id, and the producer's pinned identity
// (or one of its ranks') when kv.engine_id pins one; Mooncake's decode parameters are held to
// it too.
func checkEngineID(d *Descriptor, pair Pair) *Rejection {
	id, ok := d.stringView("remote_engine_id")
	if !ok || id == "" {
		return Reject(ReasonMissingEngineIdentity, "remote_engine_id is absent, empty or not a string")
	}
	if pin := pair.Producer.EngineID; pin != "" && !sameEngineID(id, pin) {
		return Reject(ReasonMissingEngineIdentity, "remote_engine_id %q is not producer %s's pinned identity %q",
			id, pair.Producer.Engine, pin)
	}
	return nil
}

// sameEngineID accepts the pinned id itself or the id a data-parallel rank derives from it.
func sameEngineID(got, pinned string) bool {
	if got == pinned {
		return true
	}
	rank, ok := strings.CutPrefix(got, pinned+"_dp")
	if !ok || rank == "" {
		return false
	}
	for _, c := range rank {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
