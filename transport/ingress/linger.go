package ingress

import (
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Lingering close. When the router answers before it read the whole request (413 for a body over
// server.max_body_bytes, 431, 400) and closes at once, the unread bytes in the kernel's receive
// buffer make it send a RST, and a client still uploading sees a reset instead of the answer (the
// openai SDK reports ECONNRESET and retries the upload). So such a connection is closed the way
// nginx's lingering_close does: the answer is flushed, the write side shut (FIN), and what the
// client still sends is read and discarded, bounded in bytes and time, before the close.
const (
	lingerMaxBytes = 64 << 20
	lingerMaxTime  = 3 * time.Second
)

// lingerListener hands fasthttp connections that can linger on close.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, err
}

// lingerConn is a client TCP connection; *net.TCPConn is embedded, so the disconnect watcher
// still finds its socket (syscall.Conn).
type lingerConn struct {
	*net.TCPConn
	linger atomic.Bool
}

// Close drains what the client still sends, when lingering was asked for, then closes.
func (c *lingerConn) Close() error {
	if c.linger.Load() {
		_ = c.TCPConn.CloseWrite()
		if c.TCPConn.SetReadDeadline(time.Now().Add(lingerMaxTime)) == nil {
			_, _ = io.CopyN(io.Discard, c.TCPConn, lingerMaxBytes)
		}
	}
	return c.TCPConn.Close()
}

// lingerOnClose asks for a lingering close of ctx's connection.
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	if c, ok := ctx.Conn().(*lingerConn); ok {
		c.linger.Store(true)
	}
}

// hangUp ends a request whose client is gone without writing a byte: no status at all, never a
// success one. A client that half-closed (shutdown(SHUT_WR)) after its request is treated as
// gone, as most proxies do; it gets the connection closed.
func hangUp(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {}) // fasthttp closes the connection once this returns
}
