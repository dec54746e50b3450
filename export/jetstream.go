package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// JetStream publishes a route's changes to a JetStream stream that holds
// the route's messages alone, one message per change, with the change's
// id as its Nats-Msg-Id and the resume token in its headers.
//
// Each message expects the stream's last sequence to be the one its
// predecessor got (Nats-Expected-Last-Sequence, with the stream named by
// Nats-Expected-Stream), so a message JetStream refuses is never followed
// by a stored later one: the stream always holds a first part of the
// route's changes, and its last message says where to go on from. A
// message JetStream reports as a duplicate is not stored and moves
// nothing, so one is an error too, except a gap's GAP_START, published
// again when a gap resumes after a crash.
//
// A JetStream is used by one route, one call at a time.
type JetStream struct {
	JS jetstream.JetStream
	// Stream is the route's stream; it must exist, with limits retention
	// and no max age (Resume says why).
	Stream string
	// Subject makes each change's subject, from SubjectFields; it must
	// give subjects the stream takes.
	Subject *template.Template
	// Cluster names the cluster in the changes' ids.
	Cluster string
	// Resource is the route's: Resume checks that the stream takes its
	// gaps' markers. Optional.
	Resource schema.GroupVersionResource

	last       uint64 // the stream's last sequence, as Resume read it and acknowledgements moved it
	maxMsgSize int64  // the stream's largest message, as Resume read it; 0: the server's max_payload
}

// SubjectFields are what a subject template reads: each a valid subject
// token (subjectToken).
type SubjectFields struct {
	Type, Group, Version, Resource, Namespace, Name string
}

// ParseSubject parses a subject template, such as
// "k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}", and checks that it makes
// a subject a message can be published to.
func ParseSubject(text string) (*template.Template, error) {
	t, err := template.New("subject").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	sample := SubjectFields{Type: "MODIFIED", Group: "apps", Version: "v1", Resource: "deployments", Namespace: "default", Name: "web"}
	subject, err := executeSubject(t, sample)
	if err != nil {
		return nil, err
	}
	if err := checkSubject(subject); err != nil {
		return nil, fmt.Errorf("%q makes %q for apps/v1 deployments default/web: %w", text, subject, err)
	}
	return t, nil
}

func executeSubject(t *template.Template, f SubjectFields) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, f); err != nil {
		return "", err
	}
	return b.String(), nil
}

// checkSubject checks that subject can be published to: tokens separated
// by dots, none empty, with no white space or wildcard.
func checkSubject(subject string) error {
	if subject == "" {
		return errors.New("an empty subject")
	}
	for token := range strings.SplitSeq(subject, ".") {
		switch {
		case token == "":
			return errors.New("an empty token: a subject is tokens separated by single dots")
		case token == "*" || token == ">":
			return fmt.Errorf("the wildcard %q: a message is published to a subject without wildcards", token)
		case strings.ContainsAny(token, " \t\r\n"):
			return fmt.Errorf("white space in %q", token)
		}
	}
	return nil
}

// Resume reads the resume token of the stream's last message.
func (s *JetStream) Resume(ctx context.Context) (string, error) {
	stream, err := s.stream(ctx)
	if err != nil {
		return "", err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("export: stream %s: %w", s.Stream, err)
	}
	// The stream is the route's record of what its consumers hold: it
	// must keep its last message.
	switch cfg := info.Config; {
	case cfg.Retention != jetstream.LimitsPolicy:
		return "", fmt.Errorf("%w: stream %s has %s retention, which deletes messages consumers took; the route resumes from its last message: use limits retention",
			errPermanent, s.Stream, cfg.Retention)
	case cfg.MaxAge > 0:
		return "", fmt.Errorf("%w: stream %s has a max age (%s): after a quiet spell that long its last message, which says where the route resumes, is gone; set no max age, and bound it by max messages or bytes",
			errPermanent, s.Stream, cfg.MaxAge)
	}
	s.maxMsgSize = int64(info.Config.MaxMsgSize)
	if s.Resource.Resource != "" {
		if err := s.takesMarkers(info.Config.Subjects); err != nil {
			return "", err
		}
	}
	st := info.State
	if st.LastSeq == 0 {
		s.last = 0
		return "", nil
	}
	if st.Msgs == 0 {
		return "", fmt.Errorf("%w: stream %s has held %d messages and holds none now (purged?): the route cannot know where it was; to export from scratch, delete the stream and create it again",
			errPermanent, s.Stream, st.LastSeq)
	}
	msg, err := stream.GetMsg(ctx, st.LastSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", fmt.Errorf("%w: the last message of stream %s (sequence %d) was deleted: the route cannot know where it was; to export from scratch, delete the stream and create it again",
			errPermanent, s.Stream, st.LastSeq)
	}
	if err != nil {
		return "", fmt.Errorf("export: the last message of stream %s: %w", s.Stream, err)
	}
	// A gap's start on a route that had no position has an empty token:
	// resuming from it starts again.
	tokens, ok := msg.Header[HeaderResumeToken]
	if !ok {
		return "", fmt.Errorf("%w: the last message of stream %s (sequence %d) has no %s: the stream must hold the route's messages alone",
			errPermanent, s.Stream, msg.Sequence, HeaderResumeToken)
	}
	s.last = st.LastSeq
	if len(tokens) == 0 {
		return "", nil
	}
	return tokens[0], nil
}

// takesMarkers checks that a stream of subjects takes the route's gap
// markers, whose subjects have "_" for the namespace and name: a stream
// made for one namespace's subjects may not, which the route would
// otherwise find only at its first gap.
func (s *JetStream) takesMarkers(subjects []string) error {
	for _, t := range []hubclient.EventType{GapStart, GapEnd} {
		subject, err := executeSubject(s.Subject, SubjectFields{Type: string(t), Group: subjectToken(s.Resource.Group),
			Version: subjectToken(s.Resource.Version), Resource: subjectToken(s.Resource.Resource), Namespace: "_", Name: "_"})
		if err != nil {
			return errors.Join(errPermanent, err)
		}
		if !slices.ContainsFunc(subjects, func(filter string) bool { return subjectMatches(filter, subject) }) {
			return fmt.Errorf("%w: stream %s does not take %s, the subject of the route's %s markers (namespace and name _): add it to the stream's subjects %v",
				errPermanent, s.Stream, subject, t, subjects)
		}
	}
	return nil
}

// subjectMatches tells whether a subject filter (tokens, * and >) takes
// subject.
func subjectMatches(filter, subject string) bool {
	f, t := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, token := range f {
		switch {
		case token == ">":
			return len(t) > i
		case i >= len(t):
			return false
		case token != "*" && token != t[i]:
			return false
		}
	}
	return len(f) == len(t)
}

func (s *JetStream) stream(ctx context.Context) (jetstream.Stream, error) {
	stream, err := s.JS.Stream(ctx, s.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: stream %s does not exist: create it, with the subjects of the route's template", errPermanent, s.Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("export: stream %s: %w", s.Stream, err)
	}
	return stream, nil
}

// Publish publishes changes, pipelined, and waits for JetStream's
// acknowledgement of each. A gap's GAP_START is published alone, so that
// one the stream already holds can be passed over.
func (s *JetStream) Publish(ctx context.Context, changes []Change) (int, error) {
	maxPayload := s.JS.Conn().MaxPayload()
	if s.maxMsgSize > 0 && s.maxMsgSize < maxPayload {
		maxPayload = s.maxMsgSize
	}
	done := 0
	futures := make([]jetstream.PubAckFuture, 0, len(changes))
	for i, c := range changes {
		if c.Type == GapStart {
			n, err := s.wait(ctx, futures, nil)
			if done += n; err != nil {
				return done, err
			}
			futures = futures[:0]
		}
		msg, id, err := s.message(c, maxPayload)
		if err != nil {
			n, _ := s.wait(ctx, futures, nil)
			return done + n, err
		}
		f, err := s.JS.PublishMsgAsync(msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(s.Stream),
			jetstream.WithExpectLastSequence(s.last+uint64(len(futures))))
		if err != nil {
			n, _ := s.wait(ctx, futures, nil)
			return done + n, fmt.Errorf("export: publishing to %s: %w", msg.Subject, err)
		}
		futures = append(futures, f)
		if c.Type == GapStart || i == len(changes)-1 {
			n, err := s.wait(ctx, futures, nil)
			if done += n; err != nil {
				return done, err
			}
			futures = futures[:0]
		}
	}
	return done, nil
}

// wait waits for the acknowledgements of futures, in order, and returns
// how many came before the first error (or failed, the error publishing
// the next one).
func (s *JetStream) wait(ctx context.Context, futures []jetstream.PubAckFuture, failed error) (int, error) {
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				if f.Msg().Header.Get(HeaderType) == string(GapStart) {
					continue // the gap resumed after a crash: its start is held
				}
				return i, fmt.Errorf("export: stream %s already holds change %s (sequence %d): another exporter is publishing this route, or the stream is not the route's alone",
					s.Stream, f.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence)
			}
			s.last = ack.Sequence
		case err := <-f.Err():
			return i, s.refused(f.Msg(), err)
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return len(futures), failed
}

// refused says why JetStream refused msg; permanent when no retry helps.
func (s *JetStream) refused(msg *nats.Msg, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamMismatch {
		return fmt.Errorf("%w: subject %s belongs to another stream than %s: make the route's subject template give subjects of %s alone",
			errPermanent, msg.Subject, s.Stream, s.Stream)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("export: publishing to %s: no stream answered: is it one of stream %s's subjects? (%w)", msg.Subject, s.Stream, err)
	}
	return fmt.Errorf("export: publishing to %s: %w", msg.Subject, err)
}

// jsErrCodeStreamMismatch is JetStream's "expected stream does not
// match" (JSStreamMismatchErr).
const jsErrCodeStreamMismatch jetstream.ErrorCode = 10060

// headerRoom is what a message's headers besides the change's own may
// take: Nats-Msg-Id, Nats-Expected-Stream and Nats-Expected-Last-Sequence,
// and the header block's framing.
const headerRoom = 256

func (s *JetStream) message(c Change, maxPayload int64) (*nats.Msg, string, error) {
	fields := SubjectFields{
		Type: subjectToken(string(c.Type)), Group: subjectToken(c.Resource.Group), Version: subjectToken(c.Resource.Version),
		Resource: subjectToken(c.Resource.Resource), Namespace: subjectToken(c.Namespace), Name: subjectToken(c.Name),
	}
	subject, err := executeSubject(s.Subject, fields)
	if err == nil {
		err = checkSubject(subject)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: the subject of %s %s/%s: %w", errPermanent, c.Type, c.Namespace, c.Name, err)
	}
	id := c.ID(s.Cluster)
	msg := nats.NewMsg(subject)
	msg.Data = c.Object
	msg.Header.Set(HeaderResumeToken, c.ResumeToken)
	msg.Header.Set(HeaderType, string(c.Type))
	msg.Header.Set(HeaderResourceVersion, c.ResourceVersion)
	if c.FromRelist || c.Resync {
		msg.Header.Set(HeaderFromRelist, "true")
	}
	if c.Replaces {
		msg.Header.Set(HeaderGapReplaces, "true")
	}
	if size := int64(len(subject) + headerSize(msg.Header) + headerRoom + len(msg.Data)); maxPayload > 0 && size > maxPayload {
		// A message the server refuses for good would hold the route for
		// ever: publish the change without its object, so that its
		// consumers know which object changed, and read it from the API.
		identity, err := IdentityOf(c.Object)
		if err != nil {
			return nil, "", err
		}
		msg.Data = nil
		msg.Header.Set(HeaderObjectOmitted, fmt.Sprintf("the message would be %d bytes, more than the %d the server (max_payload) or stream (max_msg_size) takes", size, maxPayload))
		msg.Header.Set(HeaderObjectIdentity, string(identity))
	}
	return msg, id, nil
}

// headerSize is how many bytes h takes in a message, about.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
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

// Held reads the whole stream and returns, for each object, the last
// change of it unless that was a DELETED.
func (s *JetStream) Held(ctx context.Context) (map[ObjectKey]Held, error) {
	stream, err := s.stream(ctx)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("export: stream %s: %w", s.Stream, err)
	}
	held := map[ObjectKey]Held{}
	if info.State.Msgs == 0 {
		return held, nil
	}
	end := info.State.LastSeq
	consumer, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("export: reading stream %s: %w", s.Stream, err)
	}
	msgs, err := consumer.Messages()
	if err != nil {
		return nil, fmt.Errorf("export: reading stream %s: %w", s.Stream, err)
	}
	defer msgs.Stop()
	for {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		msg, err := msgs.Next(jetstream.NextContext(ctx))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("export: reading stream %s: %w", s.Stream, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("export: reading stream %s: %w", s.Stream, err)
		}
		object := msg.Data()
		if len(object) == 0 {
			object = []byte(msg.Headers().Get(HeaderObjectIdentity))
		}
		if err := hold(held, msg.Headers().Get(HeaderType), object); err != nil {
			return nil, fmt.Errorf("export: stream %s, sequence %d: %w", s.Stream, meta.Sequence.Stream, err)
		}
		if meta.Sequence.Stream >= end {
			return held, nil
		}
	}
}

// hold applies a change read back from a sink (its type, and its object
// or the object's identity) to what its consumers hold.
func hold(held map[ObjectKey]Held, changeType string, object []byte) error {
	switch changeType {
	case "ADDED", "MODIFIED", "DELETED":
	default:
		return nil // a gap's marker
	}
	var meta struct {
		Metadata struct{ Namespace, Name, UID, ResourceVersion string }
	}
	if err := json.Unmarshal(object, &meta); err != nil {
		return fmt.Errorf("a %s's object: %w", changeType, err)
	}
	m := meta.Metadata
	key := ObjectKey{m.Namespace, m.Name}
	if changeType == "DELETED" {
		delete(held, key)
		return nil
	}
	identity, err := IdentityOf(object)
	if err != nil {
		return err
	}
	held[key] = Held{UID: m.UID, ResourceVersion: m.ResourceVersion, Identity: identity}
	return nil
}
