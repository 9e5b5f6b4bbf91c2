package kvwire

import (
	"encoding/binary"
	"fmt"
)

// The ZeroMQ side of vLLM's ZmqEventPublisher (kv_events.py):
//
//   - PUB: every batch is [topic, seq as 8 bytes big-endian (count() from 0), payload];
//   - ROUTER replay: a request arrives as [identity, "", start as 8 bytes big-endian]; the
//     answer is [identity, "", seq, payload] for every buffered batch with seq ≥ start, then
//     [identity, "", END_SEQ, ""] with END_SEQ = (-1).to_bytes(8, "big", signed=True). A
//     request of another frame count is logged and ignored.

// Frames is one published batch's three frames.
func Frames(topic []byte, seq uint64, payload []byte) [][]byte {
	return [][]byte{topic, binary.BigEndian.AppendUint64(nil, seq), payload}
}

// ParseReplayRequest reads a ROUTER's received frames: the client identity and start.
func ParseReplayRequest(frames [][]byte) (identity []byte, start uint64, err error) {
	if len(frames) != 3 || len(frames[2]) != 8 {
		return nil, 0, fmt.Errorf("kv events: invalid replay request of %d frames", len(frames))
	}
	return frames[0], binary.BigEndian.Uint64(frames[2]), nil
}

// ReplayFrames answers one buffered batch to identity.
func ReplayFrames(identity []byte, seq uint64, payload []byte) [][]byte {
	return [][]byte{identity, {}, binary.BigEndian.AppendUint64(nil, seq), payload}
}

// ReplayEndFrames ends a replay to identity.
func ReplayEndFrames(identity []byte) [][]byte {
	return [][]byte{identity, {}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {}}
}
