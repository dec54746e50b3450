package server

import (
	"net/http"
	"sync"

	"github.com/informerhub/informerhub/server/cork"
)

// envelopeWriter is the http.ResponseWriter connect-go writes a call's
// response to: it hands net/http each message whole, in one Write.
//
// connect-go writes a message as two writes, its 5-byte envelope prefix and
// then its payload, and flushes after each message of a stream. net/http's
// HTTP/2 server buffers a handler's writes in 4 KiB: a message larger than
// that (a 4 KiB object's event) went out as two DATA frames, each handed
// to the connection's writing goroutine and waited for, twice the frames
// and the wake-ups of one. Held back here, the prefix goes with the
// payload: one DATA frame, one handoff (HTTP/1.1 gets fewer chunks too).
// Only writes smaller than held are held, until the next write or Flush;
// every other write goes straight through, and its error with it. A
// payload larger than maxJoinBuffer follows its prefix in a write of its
// own: a second frame costs it little, and a copy of it would cost a
// buffer its size per stream.
//
// Over HTTP/1.1, net/http writes a message to the connection in pieces
// all the same (a chunk's header, then the message through its 4 KiB
// buffer): when conn is set, the connection holds a message's writes from
// its first to its Flush (cork.Conn.Hold), so that the message goes out
// in one system call, not two.
type envelopeWriter struct {
	http.ResponseWriter
	held [envelopePrefixLen]byte
	n    int // bytes of held in use
	// conn is the connection of an HTTP/1.1 response, when it is a
	// cork.Conn; holding is set while it holds the message being written.
	conn    *cork.Conn
	holding bool
}

// envelopePrefixLen is the size of the envelope prefix of the Connect
// protocol, gRPC and gRPC-Web: a flags byte and a 4-byte length.
const envelopePrefixLen = 5

// joinBuffers are the buffers in which a held prefix meets its payload,
// between uses.
var joinBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxJoinBuffer bounds the messages joined, and so the buffers joinBuffers
// keeps.
const maxJoinBuffer = 64 << 10

func (w *envelopeWriter) Write(p []byte) (int, error) {
	if w.conn != nil && !w.holding {
		w.conn.Hold()
		w.holding = true
	}
	if w.n+len(p) <= len(w.held) {
		w.n += copy(w.held[w.n:], p)
		return len(p), nil
	}
	if w.n == 0 {
		return w.ResponseWriter.Write(p)
	}
	if w.n+len(p) > maxJoinBuffer {
		if err := w.writeHeld(); err != nil {
			return 0, err
		}
		return w.ResponseWriter.Write(p)
	}
	buf := joinBuffers.Get().(*[]byte)
	joined := append(append((*buf)[:0], w.held[:w.n]...), p...)
	held := w.n
	w.n = 0
	n, err := w.ResponseWriter.Write(joined)
	*buf = joined[:0]
	joinBuffers.Put(buf)
	// Of p, what was written past the held bytes.
	return max(n-held, 0), err
}

// writeHeld writes what is held.
func (w *envelopeWriter) writeHeld() error {
	if w.n == 0 {
		return nil
	}
	n := w.n
	w.n = 0
	_, err := w.ResponseWriter.Write(w.held[:n])
	return err
}

// Flush writes what is held, and flushes it to the client: connect-go
// flushes so after each message.
func (w *envelopeWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush, with net/http's error (http.ResponseController).
func (w *envelopeWriter) FlushError() error {
	err := w.writeHeld()
	if err == nil {
		err = http.NewResponseController(w.ResponseWriter).Flush()
	}
	if released := w.endHold(); err == nil {
		err = released
	}
	return err
}

// finish writes what is held once the handler is done.
func (w *envelopeWriter) finish() {
	_ = w.writeHeld()
	_ = w.endHold()
}

// endHold ends the connection's Hold, writing what it held.
func (w *envelopeWriter) endHold() error {
	if !w.holding {
		return nil
	}
	w.holding = false
	return w.conn.Release()
}

// Unwrap returns the ResponseWriter under w, for http.ResponseController.
func (w *envelopeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
