package informerhub

import (
	"context"
	"strconv"
	"strings"

	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/stream"
	"github.com/informerhub/informerhub/informerhub/internal/token"
)

// DigestRequest asks for the digest of a selection at a position.
type DigestRequest struct {
	Selector Selector
	// ResumeToken is the position to digest: a token of a Watch or
	// Snapshot of the same selection (one of initial events digests the
	// objects they listed up to it). Empty: now.
	ResumeToken string
}

// DigestResult is the digest (package digest) of the objects a selection
// selects at a position, which a client holding them computes alike.
type DigestResult struct {
	Count  uint64
	Digest string
	// ResourceVersion and ResumeToken are the position digested: a Watch
	// from ResumeToken continues exactly after it.
	ResourceVersion string
	ResumeToken     string
	// Moved is set when the request's token is older than the history in
	// memory: the digest is then of the current position, never of
	// another one under the asked one's name.
	Moved bool
}

// Digest digests the objects a selection selects at a position. For a
// selection of whole namespaces (or of all), it reads the digest the feed
// keeps; for others it costs a scan of the selection's objects now, as a
// Snapshot does, off the feed's lock. Then one hash per change since the
// position. It stops when ctx ends.
func (h *Hub) Digest(ctx context.Context, req DigestRequest) (DigestResult, error) {
	info, sel, err := h.prepare(ctx, req.Selector)
	if err != nil {
		return DigestResult{}, err
	}
	var at *state.Position
	var tok *token.Token
	if req.ResumeToken != "" {
		if strings.Contains(req.ResumeToken, ".") { // base64 has none; a WatchMany's joins its watches' with them
			return DigestResult{}, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken,
				Reason: "a WatchMany's resume token holds one per watch: pass the token of this selector's watch (its event's resume_token)"}
		}
		if tok, err = checkToken(req.ResumeToken, info, sel); err != nil {
			return DigestResult{}, err
		}
		at = &tok.Pos
	}
	e, err := h.feeds.Acquire(ctx, info)
	if err != nil {
		return DigestResult{}, err
	}
	defer h.feeds.Release(e)
	f := e.Feed()
	// The feed keeps the digests of whole namespaces and of all: those
	// cost no scan, unless the client holds only some of them (an
	// initial-events token).
	kept := sel.SelectsWholeNamespaces() && (tok == nil || !tok.Initial)
	d, err := f.CloneForDigest(sel, at, kept)
	if err != nil {
		return DigestResult{}, err
	}
	if d.Clone != nil {
		defer f.CloseClone(d.Clone)
	}
	// The position digested, as a token: the request's, at this feed's
	// numbering, or the current one when the history no longer holds it.
	digested := token.Token{Pos: d.At}
	held := func(*state.Object) bool { return true }
	if tok != nil && tok.Initial && !d.Moved {
		// Initial events list the state in order: the client holds those
		// up to the token's object, none if it names none; a Watch from
		// the token continues them.
		digested.Initial, digested.Selector, digested.AfterNamespace, digested.AfterName = true, tok.Selector, tok.AfterNamespace, tok.AfterName
		last := &state.Object{Namespace: tok.AfterNamespace, Name: tok.AfterName}
		listed := tok.AfterNamespace != "" || tok.AfterName != ""
		held = func(o *state.Object) bool { return listed && !state.ObjectLess(last, o) }
	}
	var set digest.Set
	if d.Kept != nil {
		set = *d.Kept
	} else {
		tree, eq := d.Tree, d.Eq
		if d.Build != nil {
			tree, eq = f.BuildIndex(d.Build, tree)
		}
		if set, err = digestNow(ctx, stream.NewCursor(tree, sel, eq), d.Clone, held); err != nil {
			return DigestResult{}, err
		}
	}
	// Undo the changes after the position, newest first: each takes its
	// new state out and puts its previous one back, where selected.
	var eval selection.Evaluation
	selected := func(o *state.Object) bool {
		if !held(o) {
			return false
		}
		eval.Reset()
		return sel.Matches(o, &eval).Match
	}
	for i := len(d.Records) - 1; i >= 0; i-- {
		r := d.Records[i]
		if r.Type != EventDeleted && selected(r.Object) {
			set.Remove(r.Object.Hash())
		}
		if r.Type != EventAdded && r.Previous != nil && selected(r.Previous) {
			set.Add(r.Previous.Hash())
		}
	}
	return DigestResult{
		Count:           set.Count(),
		Digest:          set.String(),
		ResourceVersion: strconv.FormatUint(d.At.RV, 10),
		ResumeToken:     f.Events().Token(digested),
		Moved:           d.Moved,
	}, nil
}

// digestNow digests what a cursor selects and held keeps, a batch at a
// time, stopping when ctx ends or the clone is ended for memory.
func digestNow(ctx context.Context, c *stream.Cursor, clone *state.Clone, held func(*state.Object) bool) (digest.Set, error) {
	var set digest.Set
	for {
		o := c.Peek()
		if o == nil {
			if c.Finished() {
				return set, nil
			}
			if err := ctx.Err(); err != nil {
				return digest.Set{}, err
			}
			if err := clone.Err(); err != nil {
				return digest.Set{}, err
			}
			c.Fill(stream.CursorBatch)
			continue
		}
		c.Take()
		if held(o) {
			set.Add(o.Hash())
		}
	}
}
