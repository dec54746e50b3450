package oneport

import (
	"bufio"
	"net"
)

// httpListener hands the HTTP side its connections: each one reading
// through a buffer (readBufferedConn), without the acknowledgement of the
// matcher's SETTINGS (settingsAckConn), then as Config.HTTPConn makes it.
type httpListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn // Config.HTTPConn; nil: none
}

func (l httpListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	var conn net.Conn = &settingsAckConn{Conn: newReadBufferedConn(c)}
	if l.wrap != nil {
		conn = l.wrap(conn)
	}
	return conn, nil
}

// readBufferSize is the read buffer of each HTTP/2 connection of the HTTP
// side.
const readBufferSize = 4 << 10

// readBufferedConn reads an HTTP/2 connection through a buffer. net/http's
// HTTP/2 server reads each frame's header, then its payload, straight from
// the connection: two system calls for each of the WINDOW_UPDATE frames a
// client sends as it reads a stream (net/http's client sends two per 4 KiB
// it reads), which cost a busy server more than writing what they
// acknowledge. Through the buffer, what the client sent together is read
// with one. (grpc-go reads its connections through a buffer too.) Reads
// larger than the buffer, when it is empty, go straight to the connection.
// A connection that does not begin with HTTP/2's preface (HTTP/1.1, which
// net/http reads through a buffer of its own) is read as it is, and costs
// no buffer.
//
// Only the goroutine that serves the connection reads it.
type readBufferedConn struct {
	net.Conn
	r *bufio.Reader // once the connection began with the preface
	// seen counts the bytes read before the connection was told apart;
	// passed is set once it began with something else.
	seen   int
	passed bool
}

func newReadBufferedConn(c net.Conn) *readBufferedConn { return &readBufferedConn{Conn: c} }

// prefacePrefix is enough of HTTP/2's client preface to tell it from an
// HTTP/1.1 request: no method is PRI.
const prefacePrefix = "PRI "

func (c *readBufferedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		return c.r.Read(p)
	}
	n, err := c.Conn.Read(p)
	if !c.passed && n > 0 {
		m := min(n, len(prefacePrefix)-c.seen)
		switch {
		case string(p[:m]) != prefacePrefix[c.seen:c.seen+m]:
			c.passed = true
		case c.seen+m == len(prefacePrefix):
			c.r = bufio.NewReaderSize(c.Conn, readBufferSize)
		default:
			c.seen += m
		}
	}
	return n, err
}
