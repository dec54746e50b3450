package server

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec this one wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// outgoing is a message of a stream whose subscription counts in its
// connection's informerhub.Woken: once the codec has encoded it, it tells
// the subscription (handed, Subscription.Handed), so the connection's
// writes no longer wait for it, before gRPC may block the send on the
// stream's flow control. Each stream reuses one (streamRun.out).
type outgoing struct {
	msg    any
	handed func()
}

// EncodeEvent encodes an event as a WatchResponse, in the mem.BufferSlice
// the codec below returns, its objects as JSON strings or as Structs, and
// the message in protobuf's binary or its JSON mapping, as the event's
// Encoding says. Set it as the hub's Config.EncodeEvent: the hub
// then encodes each change once per form, and the codec sends those bytes to
// every stream of that form without allocating.
func EncodeEvent(ev *informerhub.Event) informerhub.Encoded {
	b, err := marshalWire(watchResponse(ev), ev.Encoding&encodingWireJSON != 0)
	if err != nil {
		// A WatchResponse of strings and scalars always encodes; without
		// an encoding the codec encodes the event per stream instead.
		return nil
	}
	// A SliceBuffer does not pool or free: the bytes stay the event's, and
	// every stream may send them at once.
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// marshalWire encodes msg in protobuf's JSON mapping, or else its binary:
// a stream's wire encoding.
func marshalWire(msg proto.Message, json bool) ([]byte, error) {
	if json {
		return protojson.MarshalOptions{}.Marshal(msg)
	}
	return proto.Marshal(msg)
}

func watchResponse(ev *informerhub.Event) *informerhubv1.WatchResponse {
	resp := &informerhubv1.WatchResponse{
		Type:             eventTypes[ev.Type],
		ResumeToken:      ev.ResumeToken,
		ResourceVersion:  ev.ResourceVersion,
		InitialEventsEnd: ev.InitialEventsEnd,
		FromRelist:       ev.FromRelist,
		FilterError:      ev.FilterError,
	}
	if ev.Encoding&^encodingWireJSON == encodingStruct {
		obj, errObj := structOf(ev.Object)
		prev, errPrev := structOf(ev.PreviousObject)
		if errObj == nil && errPrev == nil {
			resp.ObjectStruct, resp.PreviousObjectStruct = obj, prev
			return resp
		}
		// An object nested too deep for a Struct (see maxStructDepth),
		// or that is not a JSON object, goes as the string rather than not
		// at all.
	}
	resp.Object, resp.PreviousObject = ev.Object, ev.PreviousObject
	return resp
}

// The hub's encodings of events (informerhub.Encoding): one per
// ObjectFormat, plus encodingWireJSON for a stream whose messages go in
// protobuf's JSON mapping (the "json" codec of the Connect protocol and
// gRPC-Web) rather than its binary. Each change is encoded once per
// encoding in use.
const (
	encodingJSON     informerhub.Encoding = 0
	encodingStruct   informerhub.Encoding = 1
	encodingWireJSON informerhub.Encoding = 2
)

// encodingOf maps a request's object format, and whether its stream's
// messages go as JSON, to the hub's encoding.
func encodingOf(format informerhubv1.ObjectFormat, wireJSON bool) (informerhub.Encoding, error) {
	var wire informerhub.Encoding
	if wireJSON {
		wire = encodingWireJSON
	}
	switch format {
	case informerhubv1.ObjectFormat_OBJECT_FORMAT_UNSPECIFIED:
		return encodingJSON | wire, nil
	case informerhubv1.ObjectFormat_OBJECT_FORMAT_STRUCT:
		return encodingStruct | wire, nil
	}
	return 0, &informerhub.RequestError{Field: informerhub.FieldObjectFormat, Err: informerhub.ErrInvalidRequest,
		Reason: fmt.Sprintf("object_format %d is not one of OBJECT_FORMAT_UNSPECIFIED (JSON strings) and OBJECT_FORMAT_STRUCT", format)}
}

// maxStructDepth bounds how deep an object sent as a Struct may nest, in
// levels of JSON objects and arrays. A response carrying a Struct is one
// message level, the Struct another, and each further JSON level up to
// three more (a map entry, a Value, a Struct): an object of 32 levels makes
// at most 2 + 3×31 + 2 = 97 message levels, within the 100 that the C++,
// Java, Python and JavaScript (protobufjs) decoders accept by default
// (protobuf-go accepts 10,000). An object nested deeper is sent as JSON
// instead, so that no client is sent what it cannot decode. Built-in
// Kubernetes objects nest well within it; a custom resource that preserves
// unknown fields, or a CustomResourceDefinition's deepest schemas, may not.
const maxStructDepth = 32

// errTooDeep refuses an object nested deeper than maxStructDepth.
var errTooDeep = errors.New("the object nests too deep for a Struct")

// structOf converts an object's JSON into a google.protobuf.Struct; nil for
// no object.
func structOf(json string) (*structpb.Struct, error) {
	if json == "" {
		return nil, nil
	}
	if jsonDepth(json) > maxStructDepth {
		return nil, errTooDeep
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(unsafeBytes(json), s); err != nil {
		return nil, err
	}
	return s, nil
}

// jsonDepth returns how deep a JSON document nests its objects and arrays.
func jsonDepth(json string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(json); i++ {
		switch c := json[i]; {
		case inString && c == '\\':
			i++ // the escaped byte
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// unsafeBytes returns the bytes of s without copying them, for a decoder
// that only reads them.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

var eventTypes = map[informerhub.EventType]informerhubv1.EventType{
	informerhub.EventAdded:    informerhubv1.EventType_EVENT_TYPE_ADDED,
	informerhub.EventModified: informerhubv1.EventType_EVENT_TYPE_MODIFIED,
	informerhub.EventDeleted:  informerhubv1.EventType_EVENT_TYPE_DELETED,
	informerhub.EventBookmark: informerhubv1.EventType_EVENT_TYPE_BOOKMARK,
}

// eventEncoding returns ev as a WatchResponse in protobuf's binary or its
// JSON mapping: the hub's shared encoding when it has that one.
func eventEncoding(ev *informerhub.Event, json bool) (mem.BufferSlice, error) {
	if encoded, ok := ev.Encoded().(mem.BufferSlice); ok && (ev.Encoding&encodingWireJSON != 0) == json {
		return encoded, nil
	}
	b, err := marshalWire(watchResponse(ev), json)
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

// manyResponse encodes a WatchManyResponse around its event's encoding,
// in one buffer from gRPC's pool that gRPC frees once it has written it
// (or that the caller frees, if not gRPC): a copy of the event's bytes
// costs less than the allocations of a frame around them would. In JSON
// its fields are protojson's names, as protojson would write them.
func manyResponse(me *informerhub.ManyEvent, json bool) (mem.BufferSlice, error) {
	event, err := eventEncoding(me.Event, json)
	if err != nil {
		return nil, err
	}
	// The framing: at most 64 bytes beside the token and the event.
	size := 64 + len(me.ResumeToken) + event.Len()
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b := (*buf)[:0]
	if json {
		b = append(b, '{')
		if me.Index != 0 {
			b = append(b, `"index":`...)
			b = strconv.AppendInt(b, int64(me.Index), 10)
			b = append(b, ',')
		}
		b = append(b, `"event":`...)
		b = appendBuffers(b, event)
		// A token is URL-safe base64 and dots: nothing to escape.
		b = append(b, `,"resumeToken":"`...)
		b = append(b, me.ResumeToken...)
		b = append(b, '"')
		if me.InitialEventsEnd {
			b = append(b, `,"initialEventsEnd":true`...)
		}
		b = append(b, '}')
	} else {
		if me.Index != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(me.Index))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(event.Len()))
		b = appendBuffers(b, event)
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, me.ResumeToken)
		if me.InitialEventsEnd {
			b = protowire.AppendTag(b, 4, protowire.VarintType)
			b = protowire.AppendVarint(b, 1)
		}
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// countsEncoding returns counts as a CountResponse in protobuf's binary or
// its JSON mapping, encoded once per form for every stream that sends
// them (Counts.Encoded).
func countsEncoding(counts *informerhub.Counts, json bool) (mem.BufferSlice, error) {
	form := 0
	if json {
		form = 1
	}
	encoded, err := counts.Encoded(form, func(c *informerhub.Counts) (informerhub.Encoded, error) {
		b, err := marshalWire(countResponse(c), json)
		if err != nil {
			return nil, err
		}
		// A SliceBuffer does not pool or free: the bytes stay the counts'.
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	})
	if err != nil {
		return nil, err
	}
	return encoded.(mem.BufferSlice), nil
}

// codec is gRPC's protobuf codec, except that an *informerhub.Event is sent
// as the WatchResponse bytes the hub encoded once for all its subscribers,
// an *informerhub.ManyEvent as a WatchManyResponse around them,
// *informerhub.Counts as the CountResponse encoded once for all callers,
// and a SnapshotResponse in a buffer of its own pool (snapshotEncoding).
type codec struct {
	proto encoding.CodecV2
}

var _ encoding.CodecV2 = codec{}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if out, ok := v.(*outgoing); ok {
		encoded, err := c.Marshal(out.msg)
		out.handed()
		return encoded, err
	}
	switch m := v.(type) {
	case *informerhub.Event:
		return eventEncoding(m, false)
	case *informerhub.ManyEvent:
		return manyResponse(m, false)
	case *informerhub.Counts:
		return countsEncoding(m, false)
	case *informerhubv1.SnapshotResponse:
		return snapshotEncoding(m)
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return c.proto.Name() }

// snapshotEncoding encodes a page of a Snapshot as gRPC's protobuf codec
// does, but in a buffer of pageBuffers rather than of gRPC's pool: a page
// of 500 objects of 650 B is in the pool's 1 MiB tier, whose buffers it
// clears whole before each use, a third again of what encoding the page
// costs (BenchmarkGRPCSnapshot's profile).
func snapshotEncoding(m *informerhubv1.SnapshotResponse) (mem.BufferSlice, error) {
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(m)
		return mem.BufferSlice{mem.SliceBuffer(b)}, err
	}
	buf := pageBuffers.Get(size)
	// UseCachedSize: the size just computed, of a message nobody changes.
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pageBuffers.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pageBuffers)}, nil
}

// pageBuffers holds the buffers of the snapshot pages gRPC has written,
// for the next pages: gRPC gives a buffer back once it has written it. It
// does not clear them: an encoding overwrites all of what it sends, and
// nothing reads past it. sync.Pool lets the collector take them from an
// idle hub.
var pageBuffers = &dirtyBufferPool{}

type dirtyBufferPool struct{ pool sync.Pool }

var _ mem.BufferPool = (*dirtyBufferPool)(nil)

// Get returns a buffer of length bytes, of whatever they held before.
func (p *dirtyBufferPool) Get(length int) *[]byte {
	if buf, ok := p.pool.Get().(*[]byte); ok {
		if cap(*buf) >= length {
			*buf = (*buf)[:length]
			return buf
		}
		// Too small for this page: the collector takes it, and the pool
		// keeps the larger one instead, once written.
	}
	b := make([]byte, length)
	return &b
}

func (p *dirtyBufferPool) Put(buf *[]byte) { p.pool.Put(buf) }
