package export

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// CloudEvents extension attributes an exported event carries.
const (
	// ExtensionResumeToken is the position right after the change.
	ExtensionResumeToken = "informerhubresumetoken"
	// ExtensionFromRelist is true on a change the hub found by relisting,
	// or the watch by re-syncing: the changes in between are unknown.
	ExtensionFromRelist = "informerhubfromrelist"
	// ExtensionResourceVersion is the change's resourceVersion.
	ExtensionResourceVersion = "informerhubresourceversion"
	// ExtensionGapReplaces is true on a GAP_END whose gap listed every
	// object as ADDED: the receiver drops what it holds that the gap did
	// not list.
	ExtensionGapReplaces = "informerhubgapreplaces"
)

// The types of a gap's markers (GapStart, GapEnd), which carry no data.
const (
	TypeGapStart = "io.informerhub.gap.start"
	TypeGapEnd   = "io.informerhub.gap.end"
)

// CloudEvents sends a route's changes as CloudEvents over HTTP, one
// request each, in order: id, the change's deterministic id; source, the
// cluster and resource; subject, namespace/name; type,
// io.informerhub.object.added, .modified or .deleted; data, the object.
// A 2xx is the acknowledgement. The resume point is kept in Checkpoint,
// saved after each acknowledged batch: an exporter that dies sends again
// what followed the saved point, each with its id, so a receiver sees
// every change at least once, and a change twice only under one id.
type CloudEvents struct {
	// Client sends the events (cloudevents.NewClientHTTP, with the
	// target, and binary or structured mode).
	Client     cloudevents.Client
	Cluster    string
	Checkpoint interface {
		Load() (string, error)
		Save(token string) error
	}
	// Timeout bounds each request: a receiver that does not answer within
	// it has refused the event. 0: 30 s.
	Timeout time.Duration
}

// ExtensionObjectOmitted is on an event sent without its data, the
// object, which the receiver refused as too large (413): it says so, with
// the size. The subject says which object changed.
const ExtensionObjectOmitted = "informerhubobjectomitted"

// Resume loads the checkpoint.
func (s *CloudEvents) Resume(context.Context) (string, error) { return s.Checkpoint.Load() }

// Publish sends the changes, one after the other, and saves the last
// acknowledged one's token.
func (s *CloudEvents) Publish(ctx context.Context, changes []Change) (int, error) {
	acked := 0
	save := func() error {
		if acked == 0 {
			return nil
		}
		return s.Checkpoint.Save(changes[acked-1].ResumeToken)
	}
	for _, c := range changes {
		e, err := s.event(c)
		if err != nil {
			return acked, err
		}
		res := s.send(ctx, e)
		if tooLarge(res) && !c.IsMarker() {
			// An object the receiver refuses for good would hold the
			// route for ever: send the change without it.
			e.SetExtension(ExtensionObjectOmitted, fmt.Sprintf("the receiver refused the event, of %d bytes of data, as too large (413)", len(c.Object)))
			if err := e.SetData(cloudevents.ApplicationJSON, nil); err != nil {
				return acked, err
			}
			e.DataEncoded = nil
			res = s.send(ctx, e)
		}
		if !protocol.IsACK(res) {
			if err := save(); err != nil {
				return acked, err
			}
			return acked, fmt.Errorf("export: sending %s: %w", e.ID(), res)
		}
		acked++
	}
	return acked, save()
}

// send sends e within the timeout.
func (s *CloudEvents) send(ctx context.Context, e cloudevents.Event) protocol.Result {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return s.Client.Send(ctx, e)
}

// tooLarge tells whether a receiver refused an event as too large.
func tooLarge(res protocol.Result) bool {
	var r *cehttp.Result
	return errors.As(res, &r) && r.StatusCode == http.StatusRequestEntityTooLarge
}

func (s *CloudEvents) event(c Change) (cloudevents.Event, error) {
	e := cloudevents.NewEvent()
	e.SetID(c.ID(s.Cluster))
	group := c.Resource.Group
	if group == "" {
		group = "core"
	}
	e.SetSource(path.Join("/clusters", s.Cluster, group, c.Resource.Version, c.Resource.Resource))
	switch {
	case c.Type == GapStart:
		e.SetType(TypeGapStart)
	case c.Type == GapEnd:
		e.SetType(TypeGapEnd)
	default:
		e.SetType("io.informerhub.object." + strings.ToLower(string(c.Type)))
		if c.Namespace != "" {
			e.SetSubject(c.Namespace + "/" + c.Name)
		} else {
			e.SetSubject(c.Name)
		}
	}
	e.SetExtension(ExtensionResumeToken, c.ResumeToken)
	e.SetExtension(ExtensionResourceVersion, c.ResourceVersion)
	if c.FromRelist || c.Resync {
		e.SetExtension(ExtensionFromRelist, true)
	}
	if c.Replaces {
		e.SetExtension(ExtensionGapReplaces, true)
	}
	if c.IsMarker() {
		return e, nil
	}
	if err := e.SetData(cloudevents.ApplicationJSON, []byte(c.Object)); err != nil {
		return e, err
	}
	return e, nil
}
