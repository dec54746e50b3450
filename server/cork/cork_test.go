package cork

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// recordingConn records each write it is given.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex // guards writes
	writes [][]byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *recordingConn) Close() error { return nil }

func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

func (c *recordingConn) written() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.writes...)
}

func newTestConn(cfg Config) (*Conn, *recordingConn) {
	cfg.setDefaults()
	rec := &recordingConn{}
	return newConn(rec, cfg), rec
}

func write(t *testing.T, c *Conn, s string) {
	t.Helper()
	if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
		t.Fatalf("Write(%q): %d, %v", s, n, err)
	}
}

func wantWrites(t *testing.T, rec *recordingConn, want ...string) {
	t.Helper()
	got := rec.written()
	if len(got) != len(want) {
		t.Fatalf("%d writes %q, want %q", len(got), got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Fatalf("write %d is %q, want %q", i, got[i], want[i])
		}
	}
}

// TestWritesWaitForTheStreamsWoken: while streams of the connection were
// woken and have not sent, its writes are held; the first write once none
// is left takes them all with it, in order, in one write.
func TestWritesWaitForTheStreamsWoken(t *testing.T) {
	c, rec := newTestConn(Config{MaxHold: time.Hour})
	write(t, c, "a") // nobody woken: at once
	wantWrites(t, rec, "a")
	c.woken.Add(2)
	write(t, c, "b")
	write(t, c, "c")
	wantWrites(t, rec, "a")
	c.woken.Add(-2)
	write(t, c, "d")
	wantWrites(t, rec, "a", "bcd")
	if c.Writes() != 2 {
		t.Fatalf("Writes() = %d, want 2", c.Writes())
	}
}

// TestWhatIsHeldIsBounded: held writes go out MaxHold after the first of
// them, however many streams are still woken, and at once past MaxHeld,
// followed by the write that would have passed it, not copied into them.
func TestWhatIsHeldIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, rec := newTestConn(Config{MaxHold: time.Millisecond, MaxHeld: 4})
		c.woken.Add(1)
		write(t, c, "ab")
		time.Sleep(time.Millisecond / 2)
		synctest.Wait()
		wantWrites(t, rec)
		time.Sleep(time.Millisecond / 2)
		synctest.Wait()
		wantWrites(t, rec, "ab")

		write(t, c, "cd")
		write(t, c, "efg") // 5 bytes would be held: past MaxHeld
		wantWrites(t, rec, "ab", "cd", "efg")
		c.Close()
	})
}

// TestWhatIsHeldSettles: once no stream is woken, what is held is written
// settleDelay later if no write took it with it: the last stream's event
// was held back by its flow control, or not sent.
func TestWhatIsHeldSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, rec := newTestConn(Config{MaxHold: time.Hour})
		c.woken.Add(2)
		write(t, c, "a")
		c.woken.Add(-1)
		time.Sleep(time.Minute)
		synctest.Wait()
		wantWrites(t, rec) // one stream is still woken
		c.woken.Add(-1)
		c.settle() // as the hub calls OnZero
		time.Sleep(settleDelay)
		synctest.Wait()
		wantWrites(t, rec, "a")
	})
}

// TestCloseWritesWhatIsHeld: nothing held is lost when the connection
// closes (a GOAWAY held behind woken streams, say).
func TestCloseWritesWhatIsHeld(t *testing.T) {
	c, rec := newTestConn(Config{MaxHold: time.Hour})
	c.woken.Add(1)
	write(t, c, "goaway")
	c.Close()
	wantWrites(t, rec, "goaway")
}

// TestConnOfFindsTheStreamsConn: the credentials hand gRPC a Conn, which a
// stream's context finds through its peer; the inner credentials' AuthInfo
// stays reachable (TLS state included).
func TestConnOfFindsTheStreamsConn(t *testing.T) {
	creds := Credentials(tlsInfoCreds{}, Config{})
	server, client := net.Pipe()
	defer client.Close()
	conn, info, err := creds.ServerHandshake(server)
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
	if got := ConnOf(ctx); got == nil || got != conn {
		t.Fatalf("ConnOf: %v, want the Conn the handshake returned (%v)", got, conn)
	}
	tlsInfo, ok := info.(AuthInfo).Unwrap().(credentials.TLSInfo)
	if !ok || tlsInfo.State.ServerName != "hub" {
		t.Fatalf("Unwrap: %#v, want the inner credentials' TLSInfo", info.(AuthInfo).Unwrap())
	}
	if ConnOf(context.Background()) != nil {
		t.Fatal("ConnOf found a Conn without a peer")
	}
	conn.Close()
}

// tlsInfoCreds are credentials whose AuthInfo is a TLSInfo, as oneport's
// are for a TLS connection.
type tlsInfoCreds struct {
	credentials.TransportCredentials
}

func (tlsInfoCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, credentials.TLSInfo{State: tls.ConnectionState{ServerName: "hub"}}, nil
}

func (tlsInfoCreds) Clone() credentials.TransportCredentials { return tlsInfoCreds{} }

// blockingConn's writes block until it is closed, as a socket's do whose
// peer stopped reading (a zero window).
type blockingConn struct {
	net.Conn
	closeOnce sync.Once
	closed    chan struct{}
	writing   chan struct{} // signalled when a write blocks
}

func (c *blockingConn) Write([]byte) (int, error) {
	select {
	case c.writing <- struct{}{}:
	default:
	}
	<-c.closed
	return 0, net.ErrClosed
}

func (c *blockingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

func (c *blockingConn) SetWriteDeadline(time.Time) error { return nil }

// TestAWriteBlockedOnTheClientBlocksNothingElse: while a write waits for a
// client that stopped reading, the hub's readers (settle, which a reader
// runs when it hands its event on, perhaps under a feed's lock) do not
// wait, nor does Close, which fails the write.
func TestAWriteBlockedOnTheClientBlocksNothingElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		under := &blockingConn{closed: make(chan struct{}), writing: make(chan struct{}, 1)}
		cfg := Config{MaxHold: time.Millisecond}
		cfg.setDefaults()
		c := newConn(under, cfg)
		c.woken.Add(1)
		write(t, c, "held")
		<-under.writing // MaxHold passed: the timer's write is blocked
		c.woken.Add(1)
		write(t, c, "more") // held again, meanwhile
		c.woken.Add(-2)
		c.settle()
		synctest.Wait() // settle returned; the timer's second firing does not wait for the write
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the blocked write has failed
		if _, err := c.Write([]byte("after")); err == nil {
			t.Fatal("a write after the connection failed succeeded")
		}
	})
}

// TestTheHoldEndsByMaxHoldThoughStreamsComeAndGo: held bytes are written
// MaxHold after they began to be held, at the latest, even while the
// count keeps falling to zero and rising again.
func TestTheHoldEndsByMaxHoldThoughStreamsComeAndGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, rec := newTestConn(Config{MaxHold: time.Millisecond})
		c.woken.Add(1)
		write(t, c, "a")
		for range 30 { // a reader woken every 50µs, and gone again
			time.Sleep(50 * time.Microsecond)
			c.woken.Add(-1)
			c.settle()
			c.woken.Add(1)
			write(t, c, "b")
		}
		synctest.Wait()
		if len(rec.written()) == 0 {
			t.Fatal("nothing written 1.5ms after the hold began, with MaxHold 1ms")
		}
	})
}

// TestAHoldWritesWhatItHeldOnRelease: a connection that serves one stream
// at a time holds the pieces of a message from Hold to Release, which
// writes them in one write; a Hold within another, or a stream still
// woken, keeps them held.
func TestAHoldWritesWhatItHeldOnRelease(t *testing.T) {
	c, rec := newTestConn(Config{MaxHold: time.Hour})
	c.Hold()
	write(t, c, "chunk header ")
	write(t, c, "message")
	wantWrites(t, rec)
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	wantWrites(t, rec, "chunk header message")
	write(t, c, "after") // not held
	wantWrites(t, rec, "chunk header message", "after")

	c.Hold()
	c.Hold()
	write(t, c, "a")
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	wantWrites(t, rec, "chunk header message", "after")
	c.woken.Add(1)
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	wantWrites(t, rec, "chunk header message", "after") // the woken stream's send will take it
	c.woken.Add(-1)
	write(t, c, "b")
	wantWrites(t, rec, "chunk header message", "after", "ab")
}

// TestAHoldOfALargeMessageHoldsNoMoreThanMaxHeld: a message larger than
// MaxHeld goes after what was held, in a write of its own; nothing is
// copied past MaxHeld.
func TestAHoldOfALargeMessageHoldsNoMoreThanMaxHeld(t *testing.T) {
	c, rec := newTestConn(Config{MaxHold: time.Hour, MaxHeld: 8})
	c.Hold()
	write(t, c, "hdr ")
	big := strings.Repeat("x", 64)
	write(t, c, big)
	write(t, c, "\r\n")
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	wantWrites(t, rec, "hdr ", big, "\r\n")
	if c.buf != nil || cap(c.held) > 0 {
		t.Fatalf("still holding %d bytes", cap(c.held))
	}
}

// TestReleaseReturnsTheWritesError: the error of the write Release makes
// is the caller's, who is the one writing.
func TestReleaseReturnsTheWritesError(t *testing.T) {
	c := newConn(&failingConn{}, Config{MaxHold: time.Hour, MaxHeld: 1 << 10})
	c.Hold()
	write(t, c, "message")
	if err := c.Release(); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Release: %v, want %v", err, errWriteFailed)
	}
	if _, err := c.Write([]byte("more")); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Write after a failed one: %v, want %v", err, errWriteFailed)
	}
}

var errWriteFailed = errors.New("connection reset")

type failingConn struct{ net.Conn }

func (*failingConn) Write([]byte) (int, error) { return 0, errWriteFailed }

func (*failingConn) Close() error { return nil }

// TestNewContextPutsTheConnWhereConnOfFindsIt: a connection net/http
// serves (Wrap) is found through its requests' contexts.
func TestNewContextPutsTheConnWhereConnOfFindsIt(t *testing.T) {
	c := Wrap(&recordingConn{}, Config{})
	defer c.Close()
	if got := ConnOf(NewContext(context.Background(), c)); got != c {
		t.Fatalf("ConnOf = %p, want %p", got, c)
	}
	if got := ConnOf(NewContext(context.Background(), &recordingConn{})); got != nil {
		t.Fatalf("ConnOf of a connection that is not a Conn = %p, want nil", got)
	}
	if c.NetConn() == nil {
		t.Fatal("NetConn is nil")
	}
}
