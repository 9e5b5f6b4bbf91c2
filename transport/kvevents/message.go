package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The ZeroMQ framing, vLLM's ZmqEventPublisher's:
//
//   - PUB socket: each batch is one three-frame message: topic (the configured topic's UTF-8
//     bytes, "" by default), sequence number (8 bytes, big-endian, counting from 0 per
//     publisher start), payload (the batch's msgpack encoding). A subscriber's topic filter
//     is a prefix of the first frame, as ZeroMQ's SUB does.
//   - ROUTER replay socket: a client (vLLM's example uses REQ; a DEALER sends the empty
//     delimiter frame itself) sends one frame, the first sequence number it wants (8 bytes,
//     big-endian). The ROUTER sees [identity, "", start] and answers, for every batch still
//     in its buffer (the last buffer_steps, 10,000 by default) whose number is ≥ start, the
//     message [identity, "", seq, payload], and then the end marker [identity, "", -1 as 8
//     bytes (0xff…ff), ""]. The client receives each without the identity.

// SeqBytes is n as the 8-byte big-endian frame.
func SeqBytes(n uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), n) }

// EndSeq is the replay's end marker frame: −1 as a signed 8-byte big-endian integer.
var EndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Message is one published batch as framed.
type Message struct {
	Topic   []byte
	Seq     uint64
	Payload []byte
}

// Frames are m's three frames for the PUB socket.
func (m Message) Frames() [][]byte { return [][]byte{m.Topic, SeqBytes(m.Seq), m.Payload} }

// ParseMessage reads a PUB message's frames.
func ParseMessage(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("kvevents: a published message has %d frames, want 3 (topic, seq, payload)", len(frames))
	}
	if len(frames[1]) != 8 {
		return Message{}, fmt.Errorf("kvevents: sequence frame of %d bytes, want 8", len(frames[1]))
	}
	return Message{Topic: frames[0], Seq: binary.BigEndian.Uint64(frames[1]), Payload: frames[2]}, nil
}

// ReplayRequest is the frames a DEALER sends to ask for every batch from start on.
func ReplayRequest(start uint64) [][]byte { return [][]byte{{}, SeqBytes(start)} }

// ParseReplayRequest reads what a ROUTER received, [identity, "", start], and returns the
// identity and start.
func ParseReplayRequest(frames [][]byte) (identity []byte, start uint64, err error) {
	if len(frames) != 3 || len(frames[1]) != 0 || len(frames[2]) != 8 {
		return nil, 0, fmt.Errorf("kvevents: a replay request of %d frames, want [identity, \"\", 8-byte start]", len(frames))
	}
	return frames[0], binary.BigEndian.Uint64(frames[2]), nil
}

// ReplayReply is the ROUTER's frames for one buffered batch to identity.
func ReplayReply(identity []byte, seq uint64, payload []byte) [][]byte {
	return [][]byte{identity, {}, SeqBytes(seq), payload}
}

// ReplayEnd is the ROUTER's end-of-replay frames to identity.
func ReplayEnd(identity []byte) [][]byte { return [][]byte{identity, {}, EndSeq, {}} }

// ParseReplayReply reads what a DEALER received: ["", seq, payload], or the end marker
// (end true). A REQ socket's receive has no leading empty frame; both are accepted.
func ParseReplayReply(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	if len(frames) == 3 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	if len(frames) != 2 || len(frames[0]) != 8 {
		return 0, nil, false, fmt.Errorf("kvevents: a replay reply of %d frames, want [8-byte seq, payload]", len(frames))
	}
	if bytes.Equal(frames[0], EndSeq) {
		return 0, nil, true, nil
	}
	return binary.BigEndian.Uint64(frames[0]), frames[1], false, nil
}
