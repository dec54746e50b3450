package cork

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/informerhub/informerhub/informerhub"
)

// Config says how long and how much a Conn may hold.
type Config struct {
	// MaxHold bounds how long a write waits for the other streams woken
	// with it. Default: 1ms.
	MaxHold time.Duration
	// MaxHeld bounds the bytes held; a write that would pass it goes out
	// with them at once. Default: 256 KiB.
	MaxHeld int
}

func (c *Config) setDefaults() {
	if c.MaxHold <= 0 {
		c.MaxHold = time.Millisecond
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = 256 << 10
	}
}

// Conn is a server connection of grpc-go's that holds its writes while
// some of its streams were woken for events they have not sent yet (see
// the package's doc).
type Conn struct {
	net.Conn
	cfg Config
	// woken counts the connection's streams whose readers were woken and
	// have not taken their events yet: the hub keeps it.
	woken informerhub.Woken
	// holding is set while bytes are held, for a check without mu.
	holding atomic.Bool
	// writes counts the writes to the connection, each a system call.
	writes atomic.Uint64

	mu sync.Mutex // guards the fields below, and orders the writes
	// held is what waits to be written, in order, in buf (from
	// heldBuffers while something is held).
	held []byte
	buf  *[]byte
	// timer writes what is held MaxHold after it began to be.
	timer *time.Timer
	// err is the error a write met: every later write returns it.
	err error
}

// heldBuffers are the buffers of what Conns hold, between their uses.
var heldBuffers = sync.Pool{New: func() any { return new([]byte) }}

// settleDelay is how long after the last woken stream took its event what
// is held waits for that event before it is written without it: gRPC's
// writer, which the event's send wakes, normally writes it (and what is
// held) within microseconds; an event held back by its stream's flow
// control, or one that was not sent after all, does not keep the rest for
// MaxHold.
const settleDelay = 100 * time.Microsecond

func newConn(c net.Conn, cfg Config) *Conn {
	conn := &Conn{Conn: c, cfg: cfg}
	conn.woken.OnZero = conn.settle
	return conn
}

// Woken is what the hub counts the connection's woken streams in
// (informerhub.WatchRequest.Woken).
func (c *Conn) Woken() *informerhub.Woken { return &c.woken }

// Writes returns how many writes the connection made, each a system call.
func (c *Conn) Writes() uint64 { return c.writes.Load() }

// Write writes p after what is held, or holds it too while streams were
// woken and have not sent yet (within MaxHeld).
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.woken.Load() > 0 && len(c.held)+len(p) <= c.cfg.MaxHeld {
		c.holdLocked(p)
		return len(p), nil
	}
	if len(c.held) == 0 {
		return c.writeLocked(p)
	}
	c.holdLocked(p)
	if _, err := c.flushLocked(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// holdLocked adds p to what is held. The caller holds mu.
func (c *Conn) holdLocked(p []byte) {
	if c.buf == nil {
		c.buf = heldBuffers.Get().(*[]byte)
		c.held = (*c.buf)[:0]
		if c.timer == nil {
			c.timer = time.AfterFunc(c.cfg.MaxHold, c.flushHeld)
		} else {
			c.timer.Reset(c.cfg.MaxHold)
		}
		c.holding.Store(true)
	}
	c.held = append(c.held, p...)
}

// flushLocked writes what is held, in one write. The caller holds mu.
func (c *Conn) flushLocked() (int, error) {
	n, err := c.writeLocked(c.held)
	*c.buf = c.held[:0] // with the room it grew to
	heldBuffers.Put(c.buf)
	c.buf, c.held = nil, nil
	c.holding.Store(false)
	c.timer.Stop()
	return n, err
}

func (c *Conn) writeLocked(p []byte) (int, error) {
	c.writes.Add(1)
	n, err := c.Conn.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// flushHeld writes what is held: its MaxHold has passed, or nothing is
// left to hold it for.
func (c *Conn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 && c.err == nil {
		_, _ = c.flushLocked()
	}
}

// settle sets what is held to be written settleDelay from now: no woken
// stream is left to hold it for.
func (c *Conn) settle() {
	if !c.holding.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 {
		c.timer.Reset(settleDelay)
	}
}

// Close writes what is held, then closes the connection.
func (c *Conn) Close() error {
	c.flushHeld()
	return c.Conn.Close()
}

// ConnOf returns the Conn of the stream whose context is ctx; nil if it has
// none (a call over HTTP, or a server without Credentials).
func ConnOf(ctx context.Context) *Conn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, _ := p.AuthInfo.(AuthInfo)
	return info.conn
}

// Credentials wraps inner, the credentials of a grpc.Server: each connection
// it hands gRPC is a *Conn, and the AuthInfo inner returns comes as an
// AuthInfo around it.
func Credentials(inner credentials.TransportCredentials, cfg Config) credentials.TransportCredentials {
	cfg.setDefaults()
	return &transportCredentials{TransportCredentials: inner, cfg: cfg}
}

type transportCredentials struct {
	credentials.TransportCredentials
	cfg Config
}

func (t *transportCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := t.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return c, info, err
	}
	conn := newConn(c, t.cfg)
	return conn, AuthInfo{AuthInfo: info, conn: conn}, nil
}

func (t *transportCredentials) Clone() credentials.TransportCredentials {
	return &transportCredentials{TransportCredentials: t.TransportCredentials.Clone(), cfg: t.cfg}
}

// AuthInfo is the AuthInfo of a corked connection: the one its credentials
// gave (Unwrap), with the Conn.
type AuthInfo struct {
	credentials.AuthInfo
	conn *Conn
}

// Unwrap returns the AuthInfo the connection's credentials gave, such as
// credentials.TLSInfo.
func (a AuthInfo) Unwrap() credentials.AuthInfo { return a.AuthInfo }

// GetCommonAuthInfo returns the security level of the connection's
// credentials' AuthInfo, as grpc-go asks it of an AuthInfo.
func (a AuthInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	if c, ok := a.AuthInfo.(commonAuthInfo); ok {
		return c.GetCommonAuthInfo()
	}
	return credentials.CommonAuthInfo{}
}

// commonAuthInfo is an AuthInfo that says its security level.
type commonAuthInfo interface {
	GetCommonAuthInfo() credentials.CommonAuthInfo
}
