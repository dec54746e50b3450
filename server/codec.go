package server

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec this one wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// EncodeEvent encodes an event as a WatchResponse, in the mem.BufferSlice
// the codec below returns. Set it as the hub's Config.EncodeEvent: the hub
// then encodes each change once, and the codec sends those bytes to every
// stream without allocating.
func EncodeEvent(ev *informerhub.Event) any {
	b, err := proto.Marshal(watchResponse(ev))
	if err != nil {
		// A WatchResponse of strings and scalars always encodes; without
		// an encoding the codec encodes the event per stream instead.
		return nil
	}
	// A SliceBuffer does not pool or free: the bytes stay the event's, and
	// every stream may send them at once.
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

func watchResponse(ev *informerhub.Event) *informerhubv1.WatchResponse {
	return &informerhubv1.WatchResponse{
		Type:             eventTypes[ev.Type],
		Object:           ev.Object,
		ResumeToken:      ev.ResumeToken,
		ResourceVersion:  ev.ResourceVersion,
		InitialEventsEnd: ev.InitialEventsEnd,
	}
}

var eventTypes = map[informerhub.EventType]informerhubv1.EventType{
	informerhub.EventAdded:    informerhubv1.EventType_EVENT_TYPE_ADDED,
	informerhub.EventModified: informerhubv1.EventType_EVENT_TYPE_MODIFIED,
	informerhub.EventDeleted:  informerhubv1.EventType_EVENT_TYPE_DELETED,
	informerhub.EventBookmark: informerhubv1.EventType_EVENT_TYPE_BOOKMARK,
}

// codec is gRPC's protobuf codec, except that an *informerhub.Event is sent
// as the WatchResponse bytes the hub encoded once for all its subscribers.
type codec struct {
	proto encoding.CodecV2
}

var _ encoding.CodecV2 = codec{}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if ev, ok := v.(*informerhub.Event); ok {
		if encoded, ok := ev.Encoded().(mem.BufferSlice); ok {
			return encoded, nil
		}
		return c.proto.Marshal(watchResponse(ev))
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return c.proto.Name() }
