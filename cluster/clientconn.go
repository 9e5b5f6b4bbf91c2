package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"google.golang.org/grpc"
)

// closeFailedConnects closes a gRPC client connection whose first stream never got through its
// connect handshake.
//
// At the pinned version protoactor's endpoint writer makes a new grpc.ClientConn on every
// connect attempt (up to five, 2 s apart) and keeps only the last: each attempt that fails —
// a peer partitioned away, a peer between incarnations, this incarnation retired and dialing
// nothing more — left a ClientConn behind that gRPC went on reconnecting with backoff for the
// life of the process (measured: about 48 reconnecting connections, 48 more goroutines, after
// 10 partition flaps of a node that rejoins). A connection whose stream fails before the
// peer's connect response is of no more use to protoactor, so it is closed here, where the
// failure is seen. Once the handshake has answered, the stream's failures are protoactor's to
// handle (it closes the connection when it drops the endpoint).
func closeFailedConnects(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cc.Close()
		return nil, err
	}
	return &handshakeStream{ClientStream: s, cc: cc}, nil
}

// handshakeStream closes its connection when sending or receiving fails before the first
// message has been received.
type handshakeStream struct {
	grpc.ClientStream
	cc          *grpc.ClientConn
	established atomic.Bool
}

func (s *handshakeStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && !s.established.Load() {
		s.cc.Close()
	}
	return err
}

func (s *handshakeStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == nil:
		s.established.Store(true)
	case !s.established.Load():
		s.cc.Close()
	}
	return err
}

// alreadyClosed reports a protoactor log record that only says a connection closeFailedConnects
// closed is closed: the endpoint writer closes the last connection it made when it stops.
func alreadyClosed(r slog.Record) bool {
	if r.Message != "EndpointWriter error when closing the client conn" {
		return false
	}
	closed := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, grpc.ErrClientConnClosing) {
			closed = true
		}
		return !closed
	})
	return closed
}
