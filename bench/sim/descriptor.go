package sim

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
)

// A producer's handoff descriptor is the kv_transfer_params of its prefill response.
// appendDescriptor writes it with vLLM's key order and types (prefill-response-v2.json,
// prefill-response-newest.json), bent by the request's bad_descriptor and
// wrong_engine_id faults.
func (g *generation) appendDescriptor(b []byte, remoteRequestID string, groups [][]int) []byte {
	e, f := g.e, &g.faults
	if f.badDescriptor == badNull {
		return append(b, "null"...)
	}
	b = append(b, `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":`...)
	switch {
	case f.badDescriptor == badBlocks:
		b = append(b, `[1.5,-2,"x"]`...)
	case e.opts.KVLayout == KVLayoutGrouped:
		b = appendBlockGroups(b, groups)
	default:
		b = appendInts(b, groups[0])
	}
	if f.badDescriptor != badMissingEngine {
		id := e.EngineID()
		if f.wrongEngineID {
			id = uuid.NewString()
		}
		b = append(b, `,"remote_engine_id":`...)
		b = appendString(b, id)
	}
	port := e.kvPort
	if f.kvPort > 0 {
		port = f.kvPort // e.g. a port with nothing listening: the consumer's read fails
	}
	if f.badDescriptor == badWrongEndpoint {
		port = e.apiPort // a live port that is not a KV side channel
	}
	b = append(b, `,"remote_request_id":`...)
	b = appendString(b, remoteRequestID)
	b = append(b, `,"remote_host":`...)
	b = appendString(b, e.kvHost)
	b = append(b, `,"remote_port":`...)
	b = appendInt(b, port)
	b = append(b, `,"tp_size":`...)
	b = appendInt(b, e.opts.TPSize)
	if e.opts.KVLayout == KVLayoutGrouped {
		b = append(b, `,"dcp_size":1,"pp_size":1,"remote_num_tokens":`...)
		b = appendInt(b, g.req.promptTokens)
		b = append(b, `,"remote_blocks_expiry_time":null,"transfer_mode":"pull"`...)
	}
	if e.opts.DescriptorExtra != "" {
		b = append(b, ',')
		b = append(b, e.opts.DescriptorExtra...)
	}
	if f.badDescriptor == badWrongConnector {
		// MooncakeConnector's fields on a NIXL descriptor.
		b = append(b, `,"transfer_id":`...)
		b = appendString(b, uuid.NewString())
		b = append(b, `,"remote_bootstrap_addr":`...)
		b = appendString(b, e.kvEndpoint)
	}
	return append(b, '}')
}

func appendInts(b []byte, ids []int) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, id)
	}
	return append(b, ']')
}

func appendBlockGroups(b []byte, groups [][]int) []byte {
	b = append(b, '[')
	for i, g := range groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInts(b, g)
	}
	return append(b, ']')
}

// handoff is what a consumer needs from a descriptor to read the producer's blocks.
type handoff struct {
	engineID  string
	requestID string
	host      string
	port      int
	blocks    json.RawMessage // remote_block_ids as received
}

// errNothingToLoad marks a descriptor with an empty remote_block_ids: vLLM treats that
// as a full local prefix-cache hit and loads nothing.
var errNothingToLoad = errors.New("remote_block_ids is empty")

// parseHandoff checks a do_remote_prefill descriptor the way vLLM's NixlConnector
// does before it schedules a read (every key it needs is present), plus the types the
// read itself would trip over. Any error is a KV load failure.
func parseHandoff(p map[string]json.RawMessage) (handoff, error) {
	var h handoff
	for _, key := range []string{"remote_block_ids", "remote_engine_id", "remote_request_id", "remote_host", "remote_port"} {
		if _, ok := p[key]; !ok {
			return h, fmt.Errorf("kv_transfer_params lacks %s", key)
		}
	}
	h.blocks = p["remote_block_ids"]
	groups, _, err := parseBlockIDs(h.blocks)
	if err != nil {
		return h, err
	}
	if len(groups) == 0 || len(groups) == 1 && len(groups[0]) == 0 {
		return h, errNothingToLoad
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"remote_engine_id", &h.engineID}, {"remote_request_id", &h.requestID}, {"remote_host", &h.host}} {
		key, dst := f.key, f.dst
		if err := json.Unmarshal(p[key], dst); err != nil || *dst == "" {
			return h, fmt.Errorf("kv_transfer_params.%s must be a non-empty string, got %s", key, p[key])
		}
	}
	port, err := strconv.Atoi(string(bytes.TrimSpace(p["remote_port"])))
	if err != nil || port < 1 || port > 65535 {
		return h, fmt.Errorf("kv_transfer_params.remote_port must be an integer port, got %s", p["remote_port"])
	}
	h.port = port
	return h, nil
}

// parseBlockIDs accepts a flat list of non-negative block ids or one such list per KV
// group, and returns the groups (a flat list is one group).
func parseBlockIDs(raw json.RawMessage) (groups [][]int, grouped bool, err error) {
	bad := fmt.Errorf("remote_block_ids must be a list of non-negative integers or one such list per KV group, got %s", raw)
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, false, bad
	}
	if len(items) > 0 && bytes.HasPrefix(bytes.TrimSpace(items[0]), []byte("[")) {
		for _, g := range items {
			ids, ok := nonNegativeInts(g)
			if !ok {
				return nil, false, bad
			}
			groups = append(groups, ids)
		}
		return groups, true, nil
	}
	ids, ok := nonNegativeInts(raw)
	if !ok {
		return nil, false, bad
	}
	return [][]int{ids}, false, nil
}

func nonNegativeInts(raw json.RawMessage) ([]int, bool) {
	var ids []int
	if json.Unmarshal(raw, &ids) != nil {
		return nil, false
	}
	for _, id := range ids {
		if id < 0 {
			return nil, false
		}
	}
	return ids, true
}
