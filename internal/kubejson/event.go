package kubejson

import (
	"errors"
	"fmt"
	"io"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// Event is a watch event read in place.
type Event struct {
	Type   string
	Object []byte // nil if the event has none; a part of the input
	Header Header // the object's
}

// DecodeEvent reads the watch event that starts at b[0] into ev in one
// pass (its type, its object's bounds and its object's header) and returns
// the event's length. As in a metav1.WatchEvent, the last object member
// wins whole (an object of the wrong shape that a later one replaces is no
// error), and a null object leaves the one before.
func DecodeEvent(b []byte, ev *Event) (int, error) {
	*ev = Event{}
	start := jsonscan.SkipSpace(b, 0)
	if start < len(b) && b[start] != '{' {
		// As encoding/json: null is an empty event (which has no valid
		// type), anything else not an object an error.
		end, err := jsonscan.CheckValue(b, start)
		if err != nil || jsonscan.IsNull(b, start) {
			return end, err
		}
		return 0, fmt.Errorf("%w: a watch event must be a JSON object", ErrWrongType)
	}
	var objectErr error // of the object that stands, if it is of the wrong shape
	end, err := jsonscan.CheckMembers(b, start, func(m *jsonscan.Member) (int, error) {
		switch {
		case m.KeyIs("type"):
			return readString(b, m, 1, &ev.Type)
		case m.KeyIs("object"):
			if jsonscan.IsNull(b, m.Start) {
				return m.Start + 4, nil
			}
			var hdr Header
			end, err := decodeHeader(b, m.Start, 1, &hdr)
			if errors.Is(err, ErrWrongType) {
				// Its syntax decides whether the event is whole; its
				// shape matters only if no object replaces it.
				if end, err = jsonscan.CheckValueIn(b, m.Start, 1); err != nil {
					return 0, err
				}
				ev.Header, ev.Object, objectErr = Header{}, b[m.Start:end], fmt.Errorf("the watch event's object: %w", ErrWrongType)
				return end, nil
			}
			if err != nil {
				return 0, err
			}
			ev.Header, ev.Object, objectErr = hdr, b[m.Start:end], nil
			return end, nil
		}
		return jsonscan.CheckValueIn(b, m.Start, 1)
	})
	if err != nil {
		return 0, err
	}
	return end, objectErr
}

const (
	// readBufferSize is the buffer an EventReader starts with: events
	// smaller than it usually arrive whole in one read.
	readBufferSize = 64 << 10
	// MaxEventBytes bounds one watch event, as client-go's streaming
	// decoder does.
	MaxEventBytes = 16 << 20
)

// EventReader reads a JSON watch stream, one pass per event.
//
// client-go's JSON watch decoding reads each event three times: its framer
// scans the stream with encoding/json for where the event ends, a JSON
// decoder reads the event again into a metav1.WatchEvent (copying its
// object into a RawExtension), and the object decoder reads the object a
// third time. An EventReader checks an event's syntax, finds its type and
// its object, and reads the object's header in the same pass, over the
// bytes as they arrived. Only an event that arrives over more than one
// read is first scanned for its end (jsonscan.FrameEnd, which counts
// brackets and is cheap), then read once it is whole.
type EventReader struct {
	r          io.Reader
	buf        []byte
	start, end int // buf[start:end] is read, not yet decoded
	// frame scans an event that did not arrive whole (scanning), from
	// buf[start] up to buf[scanned].
	frame    jsonscan.FrameEnd
	scanning bool
	scanned  int
}

// NewEventReader reads the watch stream r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: r, buf: make([]byte, readBufferSize)}
}

// Next reads the next event into ev; ev.Object is valid until the next
// call. At the stream's end it returns io.EOF, or io.ErrUnexpectedEOF
// inside an event.
func (d *EventReader) Next(ev *Event) error {
	for {
		d.start = jsonscan.SkipSpace(d.buf[:d.end], d.start)
		if d.start < d.end {
			if !d.scanning {
				// Optimistically: the event is whole in the buffer.
				n, err := DecodeEvent(d.buf[d.start:d.end], ev)
				if err == nil {
					d.start += n
					return nil
				}
				if !errors.Is(err, jsonscan.ErrUnexpectedEnd) {
					return err
				}
				d.frame, d.scanning, d.scanned = jsonscan.FrameEnd{}, true, d.start
			}
			n, err := d.frame.Scan(d.buf[d.scanned:d.end])
			if err != nil {
				return err
			}
			if n >= 0 {
				// Whole now: read in one more pass, which a malformed
				// event fails.
				frameEnd := d.scanned + n
				d.scanning = false
				if _, err := DecodeEvent(d.buf[d.start:frameEnd], ev); err != nil {
					return err
				}
				d.start = frameEnd
				return nil
			}
			d.scanned = d.end
		}
		if err := d.fill(); err != nil {
			if err == io.EOF && d.start < d.end {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

// fill reads more of the stream, keeping what is not yet decoded: moved to
// the buffer's front, or into a buffer twice as large when it fills it.
func (d *EventReader) fill() error {
	if d.start == d.end && len(d.buf) > readBufferSize {
		// A large event grew the buffer; the next ones need not keep it.
		d.buf, d.start, d.end = make([]byte, readBufferSize), 0, 0
	}
	if d.start > 0 {
		n := copy(d.buf, d.buf[d.start:d.end])
		if d.scanning {
			d.scanned -= d.start
		}
		d.start, d.end = 0, n
	}
	if d.end == len(d.buf) {
		if len(d.buf) >= MaxEventBytes {
			return fmt.Errorf("a watch event is larger than %d bytes", MaxEventBytes)
		}
		grown := make([]byte, 2*len(d.buf))
		copy(grown, d.buf[:d.end])
		d.buf = grown
	}
	// As bufio.Reader does: a reader may return nothing a few times.
	for range 100 {
		n, err := d.r.Read(d.buf[d.end:])
		d.end += n
		if n > 0 {
			return nil // an error comes again with the next read
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}
