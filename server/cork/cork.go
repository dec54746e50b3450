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

// Conn is a server connection that holds its writes while some of its
// streams were woken for events they have not sent yet (see the package's
// doc): grpc-go's (Credentials), or net/http's (Wrap).
//
// Two locks: mu guards what is held, and is never held during I/O, so the
// streams' goroutines that touch it (settle, from the hub, perhaps under a
// feed's lock) never wait for a client that stopped reading; writeMu
// orders the writes to the socket, and only writers wait for it. The
// server's writer (grpc-go's, or net/http's HTTP/2 serving goroutine) is
// the one producer of bytes, so what it holds and what it then writes stay
// in order. An HTTP/1.1 connection has one stream at a time, which has
// been handed its event before it writes it: what holds its writes is the
// stream's own Hold, over one message.
type Conn struct {
	net.Conn
	cfg Config
	// woken counts the connection's streams whose readers were woken and
	// have not taken their events yet: the hub keeps it.
	woken informerhub.Woken
	// writes counts the writes to the connection, each a system call.
	writes atomic.Uint64
	// timer writes what is held, at the latest MaxHold after it began to
	// be held, or settleDelay after the count fell to zero.
	timer *time.Timer

	writeMu sync.Mutex // orders the writes to Conn; held during them

	mu sync.Mutex // guards the fields below; never held during I/O
	// held is what waits to be written, in order, in buf (from
	// heldBuffers while something is held); since is when it began to be.
	held  []byte
	buf   *[]byte
	since time.Time
	// err is the error a write met: every later write returns it.
	err error
	// holds counts the Holds not yet released.
	holds int
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

// closeFlushTimeout bounds how long Close tries to write what is held.
const closeFlushTimeout = time.Second

func newConn(c net.Conn, cfg Config) *Conn {
	conn := &Conn{Conn: c, cfg: cfg}
	conn.woken.OnZero = conn.settle
	conn.timer = time.AfterFunc(time.Hour, conn.flushHeld)
	conn.timer.Stop()
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
	if err := c.err; err != nil {
		c.mu.Unlock()
		return 0, err
	}
	if (c.woken.Load() > 0 || c.holds > 0) && len(c.held)+len(p) <= c.cfg.MaxHeld {
		c.holdLocked(p)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	if len(c.held) == 0 {
		c.mu.Unlock()
		return c.write(p)
	}
	// What is held goes first; p with it when both fit in MaxHeld, else
	// after it: a large p (an HTTP stream's message, which no frame size
	// bounds) is not copied.
	joined := len(c.held)+len(p) <= c.cfg.MaxHeld
	if joined {
		c.holdLocked(p)
	}
	held, buf := c.takeLocked()
	c.mu.Unlock()
	_, err := c.write(held)
	putHeld(buf, held)
	if err != nil {
		return 0, err
	}
	if !joined {
		return c.write(p)
	}
	return len(p), nil
}

// Hold holds the connection's writes until Release, which writes what is
// held, in one write, from the caller's goroutine (and returns that
// write's error): unless streams woken are left to hold it for, or another
// Hold is. Each Hold must be released once.
//
// It is for a connection that serves one stream at a time (HTTP/1.1),
// whose server writes one message in pieces: a chunk's header, and the
// message in its writer's buffer's lengths. On a connection whose streams
// share it, a Hold held over a send that waits for the client (HTTP/2's
// flow control) would hold the other streams' writes with it. As any other
// holding, it holds no more than MaxHeld (a larger message goes out in
// more writes), and for MaxHold at most, after which the timer writes what
// is held.
func (c *Conn) Hold() {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// Release ends a Hold.
func (c *Conn) Release() error {
	c.mu.Lock()
	c.holds--
	if c.holds > 0 || c.woken.Load() > 0 || len(c.held) == 0 {
		// Nothing to write now; a write that failed meanwhile (the
		// timer's, say) is the caller's to know.
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	if len(c.held) == 0 { // the timer wrote it meanwhile
		err := c.err
		c.mu.Unlock()
		return err
	}
	held, buf := c.takeLocked()
	c.mu.Unlock()
	_, err := c.write(held)
	putHeld(buf, held)
	return err
}

// holdLocked adds p to what is held. The caller holds mu.
func (c *Conn) holdLocked(p []byte) {
	if c.buf == nil {
		c.buf = heldBuffers.Get().(*[]byte)
		c.held = (*c.buf)[:0]
		c.since = time.Now()
		c.timer.Reset(c.cfg.MaxHold)
	}
	c.held = append(c.held, p...)
}

// takeLocked takes what is held, to write, and the buffer to give back
// after (putHeld). The caller holds mu.
func (c *Conn) takeLocked() ([]byte, *[]byte) {
	held, buf := c.held, c.buf
	c.held, c.buf = nil, nil
	c.timer.Stop()
	return held, buf
}

// putHeld gives back a buffer of what was held, with the room it grew to.
func putHeld(buf *[]byte, held []byte) {
	*buf = held[:0]
	heldBuffers.Put(buf)
}

// write writes p to the connection. The caller holds writeMu.
func (c *Conn) write(p []byte) (int, error) {
	c.writes.Add(1)
	n, err := c.Conn.Write(p)
	if err != nil {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}
	return n, err
}

// flushHeld writes what is held: its time has come. When a write is under
// way (gRPC's writer blocked on a client that stopped reading), it leaves
// what is held to gRPC's writer's next write, or Close: no goroutine of
// the timer's waits for such a client.
func (c *Conn) flushHeld() {
	if !c.writeMu.TryLock() {
		return
	}
	defer c.writeMu.Unlock()
	c.mu.Lock()
	if len(c.held) == 0 || c.err != nil {
		c.mu.Unlock()
		return
	}
	held, buf := c.takeLocked()
	c.mu.Unlock()
	_, _ = c.write(held)
	putHeld(buf, held)
}

// settle has what is held written soon: no woken stream is left to hold it
// for (Woken.OnZero). At the latest MaxHold after it began to be held.
func (c *Conn) settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 {
		return
	}
	c.timer.Reset(min(settleDelay, c.cfg.MaxHold-time.Since(c.since)))
}

// Close writes what is held, unless a write is blocked (on a client that
// stopped reading: closing is what ends it) or takes longer than a second,
// then closes the connection.
func (c *Conn) Close() error {
	if c.writeMu.TryLock() {
		c.mu.Lock()
		held, buf := c.takeLocked()
		c.mu.Unlock()
		if len(held) > 0 {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
			_, _ = c.write(held)
		}
		if buf != nil {
			putHeld(buf, held)
		}
		c.writeMu.Unlock()
	}
	c.timer.Stop()
	return c.Conn.Close()
}

// NetConn returns the connection the Conn writes to.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Wrap returns c as a Conn, for a server of HTTP (net/http's) rather than
// grpc-go's: put it in the context of each request it serves with
// NewContext (http.Server.ConnContext), so that ConnOf finds it.
func Wrap(c net.Conn, cfg Config) *Conn {
	cfg.setDefaults()
	return newConn(c, cfg)
}

type connKey struct{}

// NewContext returns ctx with c in it, when c is a Conn (see Wrap); ctx as
// it is otherwise.
func NewContext(ctx context.Context, c net.Conn) context.Context {
	if conn, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, conn)
	}
	return ctx
}

// ConnOf returns the Conn of the stream whose context is ctx: the one
// NewContext put in it, or its peer's (Credentials); nil if it has none
// (a server without either).
func ConnOf(ctx context.Context) *Conn {
	if conn, ok := ctx.Value(connKey{}).(*Conn); ok {
		return conn
	}
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
