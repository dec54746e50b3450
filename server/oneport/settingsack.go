package oneport

import (
	"bytes"
	"net"

	"golang.org/x/net/http2"
)

// The matcher sends its own SETTINGS to every HTTP/2 connection as soon as
// it has read the client preface: grpc-java and gRPC C-core (Python, Ruby,
// C++) send no request before the server's SETTINGS, and C-core gives up
// on a connection whose SETTINGS are late. grpc-go ignores the client's
// acknowledgement of them; net/http counts acknowledgements against the
// SETTINGS it sent itself, and closes a connection that acknowledges one
// more. So a connection handed to net/http loses the first acknowledgement
// its client sends, which is the one of the matcher's SETTINGS: a peer
// acknowledges SETTINGS in the order they arrive (RFC 9113, 6.5.3).

// settingsAckConn reads a connection without the first SETTINGS frame with
// the ACK flag, when the connection begins with the HTTP/2 client preface;
// other connections (HTTP/1.1) pass as they are. Once that frame is gone,
// or the connection is not HTTP/2, reads go straight to the connection.
//
// Only the goroutine that serves the connection reads it, so its state is
// unguarded.
type settingsAckConn struct {
	net.Conn

	state   ackState
	n       int // statePreface: preface bytes seen; stateHeader: header bytes held
	header  [http2FrameHeaderLen]byte
	payload uint32 // statePayload: bytes of the frame's payload left to pass
	in      []byte // what the connection read, to filter
	out     []byte // filtered, not yet returned
	err     error  // the connection's read error, returned once out is empty
}

type ackState uint8

const (
	statePreface ackState = iota
	stateHeader
	statePayload
	statePass // the acknowledgement is gone, or the connection is not HTTP/2
)

const http2FrameHeaderLen = 9

func (c *settingsAckConn) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		}
		if c.err != nil {
			return 0, c.err
		}
		if c.state == statePass {
			c.in, c.out = nil, nil // a connection may live for days
			return c.Conn.Read(p)
		}
		if c.in == nil {
			c.in = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.in)
		c.out = c.filter(c.out[:0], c.in[:n])
		c.err = err
	}
}

// filter appends in to out, less the acknowledgement, and holds back a
// frame header until it is whole.
func (c *settingsAckConn) filter(out, in []byte) []byte {
	for len(in) > 0 {
		switch c.state {
		case statePreface:
			want := http2.ClientPreface[c.n:]
			k := min(len(in), len(want))
			if !bytes.Equal(in[:k], []byte(want[:k])) {
				c.state = statePass
				return append(out, in...)
			}
			out = append(out, in[:k]...)
			in = in[k:]
			if c.n += k; c.n == len(http2.ClientPreface) {
				c.state, c.n = stateHeader, 0
			}
		case stateHeader:
			k := copy(c.header[c.n:], in)
			in = in[k:]
			if c.n += k; c.n < len(c.header) {
				continue
			}
			c.n = 0
			h := c.header
			length := uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
			if http2.FrameType(h[3]) == http2.FrameSettings && http2.Flags(h[4]).Has(http2.FlagSettingsAck) && length == 0 {
				c.state = statePass
				return append(out, in...)
			}
			out = append(out, h[:]...)
			if length > 0 {
				c.state, c.payload = statePayload, length
			}
		case statePayload:
			k := min(uint32(len(in)), c.payload)
			out = append(out, in[:k]...)
			in = in[k:]
			if c.payload -= k; c.payload == 0 {
				c.state = stateHeader
			}
		case statePass:
			return append(out, in...)
		}
	}
	return out
}
