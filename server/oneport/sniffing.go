package oneport

import (
	"net"
	"sync"

	"github.com/soheilhy/cmux"
)

// sniffing is the connections cmux has accepted and not yet handed to a
// side. cmux.Serve waits for each to send its first request (up to
// SniffTimeout) before it returns; Shutdown and Close close them instead.
type sniffing struct {
	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// accepting wraps the listener cmux accepts from.
func (sn *sniffing) accepting(l net.Listener) net.Listener { return sniffingListener{l, sn} }

// handingOver wraps a listener of a side: what it accepts is matched.
func (sn *sniffing) handingOver(l net.Listener) net.Listener { return matchedListener{l, sn} }

// closeAll closes the connections being matched, and any accepted later.
func (sn *sniffing) closeAll() {
	sn.mu.Lock()
	conns := sn.conns
	sn.conns, sn.closed = nil, true
	sn.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

type sniffingListener struct {
	net.Listener
	sn *sniffing
}

func (l sniffingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.sn.mu.Lock()
	defer l.sn.mu.Unlock()
	if l.sn.closed {
		c.Close()
		return nil, net.ErrClosed // cmux stops serving
	}
	if l.sn.conns == nil {
		l.sn.conns = map[net.Conn]struct{}{}
	}
	l.sn.conns[c] = struct{}{}
	return c, nil
}

type matchedListener struct {
	net.Listener
	sn *sniffing
}

func (l matchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if mc, ok := c.(*cmux.MuxConn); ok {
		l.sn.mu.Lock()
		delete(l.sn.conns, mc.Conn)
		l.sn.mu.Unlock()
	}
	return c, nil
}
