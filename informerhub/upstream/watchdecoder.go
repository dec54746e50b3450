package upstream

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/informerhub/informerhub/internal/kubejson"
)

// watchDecoder is a watch.Decoder of the API server's JSON watch stream
// into Objects, one pass per event (kubejson.EventReader), in place of
// client-go's three.
type watchDecoder struct {
	body       io.ReadCloser
	events     *kubejson.EventReader
	serializer serializer
}

var _ watch.Decoder = &watchDecoder{}

func newWatchDecoder(body io.ReadCloser, s serializer) *watchDecoder {
	return &watchDecoder{body: body, events: kubejson.NewEventReader(body), serializer: s}
}

// Decode returns the next event. At the stream's end it returns io.EOF, or
// io.ErrUnexpectedEOF inside an event, which watch.StreamWatcher tells
// apart from a broken stream.
func (d *watchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var ev kubejson.Event
	if err := d.events.Next(&ev); err != nil {
		return "", nil, err
	}
	switch typ := watch.EventType(ev.Type); typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Error, watch.Bookmark:
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %q", ev.Type)
	}
	if ev.Object == nil {
		return "", nil, fmt.Errorf("a %s watch event without an object", ev.Type)
	}
	// The event's bytes are the reader's buffer: object copies them.
	obj, err := d.serializer.object(ev.Object, &ev.Header)
	if err != nil {
		return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
	}
	return watch.EventType(ev.Type), obj, nil
}

// Close closes the stream.
func (d *watchDecoder) Close() {
	_ = d.body.Close()
}
