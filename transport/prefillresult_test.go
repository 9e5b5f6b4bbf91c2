package transport

import (
	"bytes"
	"testing"

	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

const goodDesc = `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1,2],"remote_engine_id":"e1","remote_request_id":"cmpl-x-0-1a2b3c4d","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`

func TestParametersIsADetachedCopy(t *testing.T) {
	d, _ := kv.ParseDescriptor([]byte(goodDesc), wire.EndpointCompletions)
	res := PrefillResult{descriptor: d}
	p := res.Parameters()
	p["remote_host"] = "evil"
	p["remote_block_ids"].([]any)[0] = 99.0
	if !bytes.Equal(res.Descriptor(), []byte(goodDesc)) {
		t.Fatalf("mutating Parameters changed the descriptor: %s", res.Descriptor())
	}
	if again := res.Parameters(); again["remote_host"] != "10.0.0.5" {
		t.Fatalf("second Parameters saw the mutation: %v", again)
	}
}
