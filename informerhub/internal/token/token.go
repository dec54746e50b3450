package token

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"

	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// Token is what a resume token says.
type Token struct {
	// Resource is the GroupVersionResource the token belongs to, named as
	// FormatResource names it: "configmaps.v1", "deployments.v1.apps".
	Resource string
	Pos      state.Position
	// Initial is set on tokens of initial events: the subscriber has
	// received the objects up to and including (AfterNamespace, AfterName)
	// of the state at Pos, and not yet the initial-events-end bookmark.
	Initial        bool
	Selector       uint64 // fingerprint of the selector the initial events were for
	AfterNamespace string
	AfterName      string
}

const (
	tokenVersion     = 1
	tokenFlagInitial = 1 << 0

	// maxTokenLength bounds what Decode reads. Real tokens are far
	// shorter: a resource name and an object key are each at most a few
	// hundred bytes.
	maxTokenLength = 4096
)

var (
	tokenEncoding = base64.RawURLEncoding
	tokenCRC      = crc32.MakeTable(crc32.Castagnoli)
)

// Replayable reports whether the hub can replay from the token when its
// history cannot place it: the token must be at a resourceVersion the
// client holds everything up to. Tokens inside a relist batch (offset) or
// inside initial events are positions of one feed instance only.
func (t *Token) Replayable() bool {
	return t.Pos.Offset == 0 && !t.Initial && t.Pos.RV > 0
}

// Encode returns the token as an opaque string: a versioned binary form in
// URL-safe base64 with a CRC-32C, so that a mangled token is rejected rather
// than misread.
func (t *Token) Encode() string {
	b := make([]byte, 0, 64+len(t.Resource)+len(t.AfterNamespace)+len(t.AfterName))
	b = append(b, tokenVersion)
	var flags byte
	if t.Initial {
		flags |= tokenFlagInitial
	}
	b = append(b, flags)
	b = appendString(b, t.Resource)
	b = binary.BigEndian.AppendUint64(b, t.Pos.Epoch)
	b = binary.AppendUvarint(b, t.Pos.Seq)
	b = binary.AppendUvarint(b, t.Pos.RV)
	b = binary.AppendUvarint(b, uint64(t.Pos.Offset))
	if t.Initial {
		b = binary.BigEndian.AppendUint64(b, t.Selector)
		b = appendString(b, t.AfterNamespace)
		b = appendString(b, t.AfterName)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, tokenCRC))
	return tokenEncoding.EncodeToString(b)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errMalformedToken = errors.New("not a resume token issued by informerhub")

// Decode parses a token. It never panics and reads at most
// maxTokenLength bytes, whatever it is given.
func Decode(s string) (*Token, error) {
	if len(s) > maxTokenLength {
		return nil, errMalformedToken
	}
	b, err := tokenEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) < 2+4 {
		return nil, errMalformedToken
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	if crc32.Checksum(body, tokenCRC) != binary.BigEndian.Uint32(sum) {
		return nil, errMalformedToken
	}
	if body[0] != tokenVersion {
		return nil, errors.New("resume token has an unknown format version (issued by a newer informerhub?)")
	}
	r := tokenReader{b: body[2:]}
	t := &Token{Initial: body[1]&tokenFlagInitial != 0}
	if body[1]&^tokenFlagInitial != 0 {
		return nil, errMalformedToken
	}
	t.Resource = r.string()
	t.Pos.Epoch = r.uint64()
	t.Pos.Seq = r.uvarint()
	t.Pos.RV = r.uvarint()
	offset := r.uvarint()
	if offset > 1<<32-1 {
		r.bad = true
	}
	t.Pos.Offset = uint32(offset)
	if t.Initial {
		t.Selector = r.uint64()
		t.AfterNamespace = r.string()
		t.AfterName = r.string()
	}
	if r.bad || len(r.b) != 0 {
		return nil, errMalformedToken
	}
	return t, nil
}

// tokenReader reads a token's fields; any short or oversized read sets bad.
type tokenReader struct {
	b   []byte
	bad bool
}

func (r *tokenReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *tokenReader) uint64() uint64 {
	if len(r.b) < 8 {
		r.bad = true
		r.b = nil
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *tokenReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.bad = true
		r.b = nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// A composite token resumes the watches of a WatchMany: for each, its
// identity (what it selects, so that a request may drop, add or change
// watches and resume the rest) and its own token. It is written
//
//	<header>.<token 0>.<token 1>...
//
// where the header is a versioned binary form in URL-safe base64, holding
// the number of watches and each one's identity, with a CRC-32C; and each
// token is the watch's own, as issued (base64 has no '.', so a composite
// is never mistaken for a token of one watch). Each token carries its own
// CRC. Building one costs a copy of the tokens, no encoding: a WatchMany
// builds one per response.
type Composite struct {
	Identities []uint64
	Tokens     []string
}

const (
	compositeVersion = 1
	// MaxCompositeWatches bounds the watches decodeComposite reads; a
	// transport bounds them further.
	MaxCompositeWatches = 256
	// maxCompositeLength bounds what decodeComposite reads.
	maxCompositeLength = MaxCompositeWatches * (maxTokenLength + 1)
)

// CompositeHeader encodes the header of a composite of these identities.
func CompositeHeader(identities []uint64) string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+8*len(identities)+4)
	b = append(b, compositeVersion)
	b = binary.AppendUvarint(b, uint64(len(identities)))
	for _, id := range identities {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, tokenCRC))
	return tokenEncoding.EncodeToString(b)
}

// EncodeComposite joins a composite's header and its watches' tokens.
func EncodeComposite(header string, tokens []string) string {
	n := len(header)
	for _, t := range tokens {
		n += 1 + len(t)
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteString(header)
	for _, t := range tokens {
		sb.WriteByte('.')
		sb.WriteString(t)
	}
	return sb.String()
}

var errMalformedComposite = errors.New("not a WatchMany resume token issued by informerhub")

// DecodeComposite parses a composite token. Its watches' tokens are checked
// when they are used. It never panics and reads at most maxCompositeLength
// bytes, whatever it is given.
func DecodeComposite(s string) (*Composite, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxCompositeLength {
		return nil, errMalformedComposite
	}
	head, rest, ok := strings.Cut(s, ".")
	if !ok {
		if _, err := Decode(s); err == nil {
			return nil, errors.New("this is the resume token of one watch (a WatchResponse's), not a WatchManyResponse's: give it as that watch's own resume_token")
		}
		return nil, errMalformedComposite
	}
	b, err := tokenEncoding.DecodeString(head)
	if err != nil || len(b) < 1+1+4 {
		return nil, errMalformedComposite
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	if crc32.Checksum(body, tokenCRC) != binary.BigEndian.Uint32(sum) {
		return nil, errMalformedComposite
	}
	if body[0] != compositeVersion {
		return nil, errors.New("WatchMany resume token has an unknown format version (issued by a newer informerhub?)")
	}
	r := tokenReader{b: body[1:]}
	n := r.uvarint()
	if r.bad || n == 0 || n > MaxCompositeWatches || uint64(len(r.b)) != 8*n {
		return nil, errMalformedComposite
	}
	c := &Composite{Identities: make([]uint64, n), Tokens: strings.SplitN(rest, ".", int(n)+1)}
	for i := range c.Identities {
		c.Identities[i] = r.uint64()
	}
	if uint64(len(c.Tokens)) != n || slices.Contains(c.Tokens, "") || strings.Contains(c.Tokens[n-1], ".") {
		return nil, errMalformedComposite
	}
	return c, nil
}
