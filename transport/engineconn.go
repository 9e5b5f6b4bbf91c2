package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// legConn is one HTTP exchange with an engine that can be aborted at any moment — while the
// request is written, while the engine thinks before its headers, or mid-body — by cancelling the
// context it was opened with. fasthttp's client has no cancellation, so the exchange is driven
// through HostClient's exported pieces (AcquireConn, AcquireReader, ReleaseConn) with the
// connection in hand: cancelling closes it, which unblocks any read at once, and the engine sees
// the disconnect and frees the sequence.
type legConn struct {
	hc   *fasthttp.HostClient
	conn net.Conn
	br   *bufio.Reader
	resp *fasthttp.Response
	stop func() bool // stops the cancellation hook; false if it already fired
	// release hands the connection back to the pool (reuse) or closes it. (fasthttp's pooled
	// connection type is unexported, so this one closure holds it.)
	release func(reuse bool)
	// bodyDone is set when the body was read to its end, so the connection may be reused.
	bodyDone bool
}

// openLeg sends req and reads the response header (and, unless stream is set, the whole body,
// bounded by maxBody). The deadline bounds the connect, the write and the header read; the caller
// moves it for the body. On error nothing needs releasing.
//
// byRef, when set, is the request's body sent by reference (wire.LegBody): each try writes it
// afresh, as a resend on another connection must.
func openLeg(ctx context.Context, hc *fasthttp.HostClient, req *fasthttp.Request, byRef *wire.LegBody, resp *fasthttp.Response,
	deadline time.Time, connectTimeout time.Duration, stream bool, maxBody int) (*legConn, error) {
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fasthttp.ErrTimeout
		}
		if byRef != nil {
			req.SetBodyStream(byRef.Reader(), byRef.Len())
		}
		lc, unsent, err := tryLeg(ctx, hc, req, resp, deadline, min(left, connectTimeout), stream, maxBody)
		if err == nil {
			return lc, nil
		}
		if left <= connectTimeout && errors.Is(err, fasthttp.ErrDialTimeout) {
			return nil, errConnectUsedBudget // the leg's own timeout, not engine.connect_timeout_s
		}
		// A keep-alive connection the engine closed while it sat idle is found before the
		// request is written, or fails the write: the engine never saw the request, so it goes
		// out once more on another connection. A request that was written is never resent here,
		// even if the engine closed without a byte of answer: it may have started on it, and a
		// second try is a retry, which only the supervisor decides (with a fresh backend ID).
		if unsent && try < 2 && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

// errConnectUsedBudget reports a connect that took all the time the leg had left.
var errConnectUsedBudget = fmt.Errorf("connecting to the engine used up the leg's time: %w", os.ErrDeadlineExceeded)

// staleAfter is how long a pooled connection may sit idle before it is checked for a close (one
// recvfrom(MSG_PEEK) system call). Engines close keep-alive connections after seconds of idleness
// (uvicorn: 5 s), and the pool drops its own after engine.idle_conn_timeout_s (4 s), so a
// connection idle for less than a second is alive unless the engine went away — and then its
// write or first read fails like any connection's would. At 50 ms the check ran on most reuses
// at moderate rates: two system calls per request. A variable so a test can shorten it.
var staleAfter = time.Second

// errStaleConn reports a pooled connection the engine had closed.
var errStaleConn = errors.New("pooled engine connection was closed by the engine")

func tryLeg(ctx context.Context, hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response,
	deadline time.Time, dialTimeout time.Duration, stream bool, maxBody int) (lc *legConn, unsent bool, err error) {
	cc, err := hc.AcquireConn(dialTimeout, false)
	if err != nil {
		if isTimeout(err) && !errors.Is(err, fasthttp.ErrDialTimeout) {
			// fasthttp passes the dialer's own timeout on when it fires before the context's
			err = fmt.Errorf("%w: %w", fasthttp.ErrDialTimeout, err)
		}
		return nil, false, err
	}
	conn := cc.Conn()
	reused := !cc.LastUseTime().IsZero()
	if err := conn.SetDeadline(deadline); err != nil {
		hc.CloseConn(cc)
		return nil, false, err
	}
	// Peeking costs a system call, so only connections idle long enough for the engine to have
	// dropped them are checked; one used moments ago is alive, or fails its write.
	if reused && time.Since(cc.LastUseTime()) > staleAfter && peerClosed(conn) {
		hc.CloseConn(cc)
		return nil, true, errStaleConn
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	fail := func(err error, unsent bool) (*legConn, bool, error) {
		stop()
		hc.CloseConn(cc)
		return nil, unsent, err
	}

	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		return fail(err, reused && isStaleConnError(err))
	}

	br := hc.AcquireReader(conn)
	resp.StreamBody = stream
	if err := resp.ReadLimitBody(br, maxBody); err != nil {
		hc.ReleaseReader(br)
		return fail(err, false)
	}
	lc = &legConn{hc: hc, conn: conn, br: br, resp: resp, stop: stop, bodyDone: !stream,
		release: func(reuse bool) {
			if reuse {
				hc.ReleaseConn(cc)
			} else {
				hc.CloseConn(cc)
			}
		}}
	return lc, reused, nil
}

// close ends the exchange: the connection goes back to the pool only if the body was read to its
// end, the engine did not ask to close it, and the cancellation hook never fired.
func (lc *legConn) close() {
	hookIdle := lc.stop()
	reuse := hookIdle && lc.bodyDone && !lc.resp.ConnectionClose()
	if lc.resp.StreamBody {
		_ = lc.resp.CloseBodyStream()
	}
	lc.hc.ReleaseReader(lc.br)
	lc.release(reuse)
}

// setReadDeadline moves the deadline for the next body reads.
func (lc *legConn) setReadDeadline(t time.Time) error { return lc.conn.SetReadDeadline(t) }

func isStaleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, fasthttp.ErrDialTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
