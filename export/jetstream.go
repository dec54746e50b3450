package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers an exported message carries besides its data.
const (
	// HeaderResumeToken holds the position right after the change: the
	// route resumes from the last message's.
	HeaderResumeToken = "Informerhub-Resume-Token"
	// HeaderType is ADDED, MODIFIED or DELETED.
	HeaderType = "Informerhub-Type"
	// HeaderResourceVersion is the change's resourceVersion.
	HeaderResourceVersion = "Informerhub-Resource-Version"
	// HeaderFromRelist is "true" on a change the hub found by relisting,
	// or the watch by re-syncing: the changes in between are unknown.
	HeaderFromRelist = "Informerhub-From-Relist"
)

// JetStream publishes a route's changes to a JetStream stream that holds
// the route's messages alone, one message per change, with the change's
// id as its Nats-Msg-Id (JetStream drops a message published again under
// the same id within the stream's duplicate window) and the resume token
// in its headers. Each message expects the previous change's id as the
// stream's last (Nats-Expected-Last-Msg-Id), so that a change JetStream
// refused can never be followed by a later one: the stream always holds
// a first part of the route's changes, and its last message says where
// to go on from.
type JetStream struct {
	JS jetstream.JetStream
	// Stream is the route's stream; it must exist.
	Stream string
	// Subject makes each change's subject, from SubjectFields; it must
	// give subjects the stream takes.
	Subject *template.Template
	// Cluster names the cluster in the changes' ids.
	Cluster string

	last string // the id of the last change the stream holds
}

// SubjectFields are what a subject template reads: each a valid subject
// token (ParseSubject).
type SubjectFields struct {
	Type, Group, Version, Resource, Namespace, Name string
}

// ParseSubject parses a subject template, such as
// "k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}".
func ParseSubject(text string) (*template.Template, error) {
	return template.New("subject").Option("missingkey=error").Parse(text)
}

// Resume reads the resume token of the stream's last message.
func (s *JetStream) Resume(ctx context.Context) (string, error) {
	stream, err := s.JS.Stream(ctx, s.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", fmt.Errorf("%w: stream %s does not exist: create it, with the subjects of the route's template", errPermanent, s.Stream)
	}
	if err != nil {
		return "", fmt.Errorf("export: stream %s: %w", s.Stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.State.Msgs == 0 {
		s.last = ""
		return "", nil
	}
	msg, err := stream.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		return "", fmt.Errorf("export: the last message of stream %s: %w", s.Stream, err)
	}
	token := msg.Header.Get(HeaderResumeToken)
	if token == "" {
		return "", fmt.Errorf("%w: the last message of stream %s (sequence %d) has no %s: the stream must hold the route's messages alone",
			errPermanent, s.Stream, msg.Sequence, HeaderResumeToken)
	}
	s.last = msg.Header.Get(jetstream.MsgIDHeader)
	return token, nil
}

// Publish publishes changes and waits for JetStream's acknowledgement of
// each.
func (s *JetStream) Publish(ctx context.Context, changes []Change) (int, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(changes))
	ids := make([]string, 0, len(changes))
	for _, c := range changes {
		msg, id, err := s.message(c)
		if err != nil {
			return s.wait(ctx, futures, ids, err)
		}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
		if prev := s.expected(ids); prev != "" {
			opts = append(opts, jetstream.WithExpectLastMsgID(prev))
		}
		f, err := s.JS.PublishMsgAsync(msg, opts...)
		if err != nil {
			return s.wait(ctx, futures, ids, err)
		}
		futures = append(futures, f)
		ids = append(ids, id)
	}
	return s.wait(ctx, futures, ids, nil)
}

// wait waits for the acknowledgements of futures, in order, and returns
// how many came before the first error (or failed, the error publishing
// the next one).
func (s *JetStream) wait(ctx context.Context, futures []jetstream.PubAckFuture, ids []string, failed error) (int, error) {
	for i, f := range futures {
		select {
		case <-f.Ok():
			s.last = ids[i]
		case err := <-f.Err():
			return i, fmt.Errorf("export: publishing to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return len(futures), failed
}

// expected is the id the stream's last message must have before the
// next change: the batch's previous one, or the last the stream held.
func (s *JetStream) expected(ids []string) string {
	if len(ids) > 0 {
		return ids[len(ids)-1]
	}
	return s.last
}

func (s *JetStream) message(c Change) (*nats.Msg, string, error) {
	var subject bytes.Buffer
	err := s.Subject.Execute(&subject, SubjectFields{
		Type: subjectToken(string(c.Type)), Group: subjectToken(c.Resource.Group), Version: subjectToken(c.Resource.Version),
		Resource: subjectToken(c.Resource.Resource), Namespace: subjectToken(c.Namespace), Name: subjectToken(c.Name),
	})
	if err != nil {
		return nil, "", errors.Join(errPermanent, err)
	}
	id := c.ID(s.Cluster)
	msg := nats.NewMsg(subject.String())
	msg.Data = c.Object
	msg.Header.Set(HeaderResumeToken, c.ResumeToken)
	msg.Header.Set(HeaderType, string(c.Type))
	msg.Header.Set(HeaderResourceVersion, c.ResourceVersion)
	if c.FromRelist || c.Resync {
		msg.Header.Set(HeaderFromRelist, "true")
	}
	return msg, id, nil
}

// subjectToken makes s one subject token: "_" for none; the bytes a token
// cannot hold ('.', '*', '>', white space) and '%' percent-encoded.
func subjectToken(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '.', '*', '>', ' ', '\t', '\r', '\n', '%':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
