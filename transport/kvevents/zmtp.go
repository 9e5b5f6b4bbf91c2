package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	zmqtransport "github.com/go-zeromq/zmq4/transport"
)

// ErrHostile is what a stream's error wraps when the publisher sent something no vLLM sends: a
// ZeroMQ frame or message over the bounds, a malformed frame header, or a payload that does not
// decode within them. The connection is closed at once.
var ErrHostile = errors.New("kvevents: hostile publisher")

// The ZeroMQ library (go-zeromq/zmq4) allocates a frame's body at the size its header claims,
// before reading it, and does so for the handshake's READY command too: one header claiming a
// terabyte ends the process. It cannot be told a limit, so every connection it dials for a KV
// event stream is wrapped in a boundedConn that follows the ZMTP 3 framing of the bytes read
// (a 64-byte greeting, then frames: a flags byte, a 1- or 8-byte size, the body) and fails the
// read that completes a header over the bounds, before the library sees the size. The wrapped
// transport is registered with the library under its own scheme, once.
const (
	zmtpScheme = "narwhal-kv-tcp"
	// greetingBytes is ZMTP 3's greeting: signature, version, mechanism, as-server, filler.
	greetingBytes = 64
	// maxCommandBytes bounds a command frame (READY and its metadata, SUBSCRIBE, PING).
	maxCommandBytes = 64 << 10
	// maxFrames bounds one message's frames: a published batch has 3, a replay reply 3 or 4.
	maxFrames = 8
	// maxMessageWire bounds one message's frames together: the payload, and the topic and
	// sequence frames around it.
	maxMessageWire = MaxMessageBytes + maxCommandBytes
)

// ZMTP frame flags.
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

var registerOnce sync.Once

// boundedEndpoint returns the library endpoint for a tcp://host:port one, registering the
// bounded transport on first use.
func boundedEndpoint(ep string) (string, error) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", fmt.Errorf("kvevents: %q is not a tcp:// endpoint", ep)
	}
	var err error
	registerOnce.Do(func() { err = zmq4.RegisterTransport(zmtpScheme, boundedTransport{zmqtransport.New("tcp")}) })
	if err != nil {
		return "", fmt.Errorf("kvevents: register the bounded ZeroMQ transport: %w", err)
	}
	return zmtpScheme + "://" + rest, nil
}

// boundedTransport is the library's TCP transport with every dialled connection bounded.
type boundedTransport struct{ zmqtransport.Transport }

func (t boundedTransport) Dial(ctx context.Context, d zmqtransport.Dialer, addr string) (net.Conn, error) {
	c, err := t.Transport.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c, framer: framer{greeting: greetingBytes}}, nil
}

// boundedConn checks the ZMTP framing of what it reads; the first violation closes the
// connection and fails this read and every later one. The library reads a connection from one
// goroutine at a time.
type boundedConn struct {
	net.Conn
	framer framer
	err    error
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if ferr := c.framer.scan(p[:n]); ferr != nil {
		c.err = fmt.Errorf("%w: %s: %v", ErrHostile, c.Conn.RemoteAddr(), ferr)
		_ = c.Conn.Close()
		return 0, c.err
	}
	return n, err
}

// framer follows ZMTP 3 framing byte by byte across reads.
type framer struct {
	greeting  int     // greeting bytes still to pass
	body      uint64  // body bytes of the current frame still to pass
	hdr       [9]byte // the frame header read so far
	hdrLen    int
	msgBytes  uint64 // the current message's frames so far
	msgFrames int
}

// scan follows b and returns an error at the first header over the bounds.
func (f *framer) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case f.greeting > 0:
			k := min(f.greeting, len(b))
			f.greeting -= k
			b = b[k:]
		case f.body > 0:
			k := min(f.body, uint64(len(b)))
			f.body -= k
			b = b[k:]
		default:
			f.hdr[f.hdrLen] = b[0]
			f.hdrLen++
			b = b[1:]
			if err := f.header(); err != nil {
				return err
			}
		}
	}
	return nil
}

// header checks the header read so far once it is whole, and starts its body.
func (f *framer) header() error {
	flags := f.hdr[0]
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return fmt.Errorf("a ZMTP frame with flags %#x", flags)
	}
	need := 2
	if flags&flagLong != 0 {
		need = 9
	}
	if f.hdrLen < need {
		return nil
	}
	f.hdrLen = 0
	size := uint64(f.hdr[1])
	if need == 9 {
		size = binary.BigEndian.Uint64(f.hdr[1:9])
	}
	if flags&flagCommand != 0 {
		if size > maxCommandBytes || flags&flagMore != 0 || f.msgFrames > 0 {
			return fmt.Errorf("a ZMTP command frame of %d bytes (flags %#x), at most %d are accepted", size, flags, maxCommandBytes)
		}
		f.body = size
		return nil
	}
	f.msgFrames++
	f.msgBytes += min(size, maxMessageWire+1)
	if f.msgBytes > maxMessageWire || f.msgFrames > maxFrames {
		return fmt.Errorf("a ZMTP message of %d frames and %d bytes so far, at most %d and %d are accepted",
			f.msgFrames, f.msgBytes, maxFrames, maxMessageWire)
	}
	if flags&flagMore == 0 {
		f.msgFrames, f.msgBytes = 0, 0
	}
	f.body = size
	return nil
}
