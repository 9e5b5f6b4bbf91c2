package transport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
)

// streamBody reads a decode response's body straight out of the engine connection's reader,
// undoing the HTTP/1.1 framing itself (chunked, a Content-Length, or until the close), so the
// SSE reader takes its lines from that one buffer. fasthttp's body stream would need a buffer of
// its own on top (one more copy of every event and 2 KiB per open stream), and would hide what
// the connection already holds: Buffered sees every byte of body in memory, so a relay batches
// events that arrived together into one client write.
//
// It implements wire.LineSource: ReadSlice returns a line within the current chunk, or a piece
// of one (with bufio.ErrBufferFull) where a chunk or the buffer ends mid-line; the slices point
// into the connection's buffer and are valid until the next call.
type streamBody struct {
	br      *bufio.Reader
	chunked bool
	// toClose: the body has no length and runs to the connection's close.
	toClose bool
	// left is what remains of the current chunk (chunked) or of the body (toClose: "a lot").
	left int64
	// crlf: a chunk's data has been read, its terminating CRLF not yet.
	crlf bool
	eof  bool
}

// errBadChunk reports framing that is not HTTP/1.1 chunked encoding.
var errBadChunk = errors.New("engine sent a malformed chunked body")

// maxChunkLine bounds a chunk-size line (with extensions) and a trailer line.
const maxChunkLine = 1 << 10

// reset starts reading a body of contentLength bytes (fasthttp's convention: -1 chunked, -2
// until the connection closes).
func (b *streamBody) reset(br *bufio.Reader, contentLength int) {
	*b = streamBody{br: br}
	switch {
	case contentLength == -1:
		b.chunked = true
	case contentLength < 0:
		b.toClose, b.left = true, math.MaxInt64
	default:
		b.left = int64(contentLength)
		b.eof = contentLength == 0
	}
}

// ReadSlice returns the body up to and including the next delim, or the part of that line the
// current chunk or the buffer holds (bufio.ErrBufferFull: the line goes on). At the body's end it
// returns io.EOF; a body cut short (the connection closed inside it) io.ErrUnexpectedEOF.
func (b *streamBody) ReadSlice(delim byte) ([]byte, error) {
	avail, err := b.avail()
	if err != nil {
		return nil, err
	}
	n, err := len(avail), bufio.ErrBufferFull
	if i := bytes.IndexByte(avail, delim); i >= 0 {
		n, err = i+1, nil
	}
	b.consume(n)
	return avail[:n], err
}

// Read reads body bytes (error responses, the drain after [DONE]).
func (b *streamBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	avail, err := b.avail()
	if err != nil {
		return 0, err
	}
	n := copy(p, avail)
	b.consume(n)
	return n, nil
}

// avail waits until some body is in the buffer and returns it (at most the current chunk's
// rest), without consuming it.
func (b *streamBody) avail() ([]byte, error) {
	for b.left == 0 {
		if b.eof || !b.chunked {
			b.eof = true
			return nil, io.EOF
		}
		if err := b.nextChunk(); err != nil {
			return nil, err
		}
	}
	if b.br.Buffered() == 0 {
		if _, err := b.br.Peek(1); err != nil {
			return nil, b.cut(err)
		}
	}
	p, _ := b.br.Peek(int(min(b.left, int64(b.br.Buffered()))))
	return p, nil
}

// consume steps over n bytes of body that avail returned (they stay valid in the buffer until
// the next read).
func (b *streamBody) consume(n int) {
	_, _ = b.br.Discard(n)
	b.left -= int64(n)
	if b.chunked && b.left == 0 {
		b.crlf = true
	}
}

// cut maps the end of the connection inside the body: the orderly end of a body that runs to
// the close, a truncation otherwise.
func (b *streamBody) cut(err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	if b.toClose {
		b.eof, b.left = true, 0
		return io.EOF
	}
	return io.ErrUnexpectedEOF
}

// Buffered is how many bytes of body (not framing) are in memory, after stepping over whatever
// framing the buffer already holds whole — never reading, so it never blocks.
func (b *streamBody) Buffered() int {
	if b.chunked && b.left == 0 && !b.eof {
		b.skipBufferedFraming()
	}
	return int(min(b.left, int64(b.br.Buffered())))
}

// eventBuffered reports whether a whole event (up to its blank line) is in memory, within the
// current chunk: a relay may hold the event it has for it at no cost. A part of an event is not
// enough: waiting for its rest would delay the event before it.
func (b *streamBody) eventBuffered() bool {
	n := b.Buffered()
	if n == 0 {
		return false
	}
	p, _ := b.br.Peek(n)
	return bytes.Contains(p, blankLF) || bytes.Contains(p, blankCRLF)
}

var blankLF, blankCRLF = []byte("\n\n"), []byte("\n\r\n")

func (b *streamBody) skipBufferedFraming() {
	if b.crlf {
		p, _ := b.br.Peek(min(2, b.br.Buffered()))
		if len(p) < 2 || p[0] != '\r' || p[1] != '\n' {
			return
		}
		_, _ = b.br.Discard(2)
		b.crlf = false
	}
	p, _ := b.br.Peek(b.br.Buffered())
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return
	}
	size, err := parseChunkSize(p[:i+1])
	if err != nil || size == 0 {
		return // the blocking path reports it, or reads the trailers
	}
	_, _ = b.br.Discard(i + 1)
	b.left = size
}

// nextChunk reads the CRLF ending the chunk before and the next chunk's size line; after the
// last chunk (size 0) it reads the trailers and returns io.EOF.
func (b *streamBody) nextChunk() error {
	if b.crlf {
		line, err := b.line()
		if err != nil {
			return err
		}
		if len(line) != 2 {
			return fmt.Errorf("%w: %q after a chunk's data instead of CRLF", errBadChunk, line)
		}
		b.crlf = false
	}
	line, err := b.line()
	if err != nil {
		return err
	}
	size, err := parseChunkSize(line)
	if err != nil {
		return err
	}
	if size > 0 {
		b.left = size
		return nil
	}
	for { // trailers, up to the blank line
		line, err := b.line()
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			b.eof = true
			return io.EOF
		}
	}
}

// line reads one framing line (CRLF included), bounded by maxChunkLine.
func (b *streamBody) line() ([]byte, error) {
	line, err := b.br.ReadSlice('\n')
	switch {
	case err == nil:
		if len(line) > maxChunkLine {
			return nil, fmt.Errorf("%w: a framing line over %d bytes", errBadChunk, maxChunkLine)
		}
		return line, nil
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("%w: a framing line over %d bytes", errBadChunk, b.br.Size())
	case errors.Is(err, io.EOF):
		return nil, io.ErrUnexpectedEOF
	}
	return nil, err
}

// parseChunkSize reads a chunk-size line: hex digits, optional extensions after ';', CRLF (a
// bare LF is tolerated, as most servers' parsers do).
func parseChunkSize(line []byte) (int64, error) {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, fmt.Errorf("%w: chunk size %q", errBadChunk, line)
	}
	var n int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, fmt.Errorf("%w: chunk size %q", errBadChunk, line)
		}
	}
	return n, nil
}
