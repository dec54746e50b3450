package informerhub

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"

	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// token is what a resume token says.
type token struct {
	// resource is the GroupVersionResource the token belongs to, named as
	// FormatResource names it: "configmaps.v1", "deployments.v1.apps".
	resource string
	pos      state.Position
	// initial is set on tokens of initial events: the subscriber has
	// received the objects up to and including (afterNamespace, afterName)
	// of the state at pos, and not yet the initial-events-end bookmark.
	initial        bool
	selector       uint64 // fingerprint of the selector the initial events were for
	afterNamespace string
	afterName      string
}

const (
	tokenVersion     = 1
	tokenFlagInitial = 1 << 0

	// maxTokenLength bounds what decodeToken reads. Real tokens are far
	// shorter: a resource name and an object key are each at most a few
	// hundred bytes.
	maxTokenLength = 4096
)

var (
	tokenEncoding = base64.RawURLEncoding
	tokenCRC      = crc32.MakeTable(crc32.Castagnoli)
)

// encode returns the token as an opaque string: a versioned binary form in
// URL-safe base64 with a CRC-32C, so that a mangled token is rejected rather
// than misread.
func (t *token) encode() string {
	b := make([]byte, 0, 64+len(t.resource)+len(t.afterNamespace)+len(t.afterName))
	b = append(b, tokenVersion)
	var flags byte
	if t.initial {
		flags |= tokenFlagInitial
	}
	b = append(b, flags)
	b = appendString(b, t.resource)
	b = binary.BigEndian.AppendUint64(b, t.pos.Epoch)
	b = binary.AppendUvarint(b, t.pos.Seq)
	b = binary.AppendUvarint(b, t.pos.RV)
	b = binary.AppendUvarint(b, uint64(t.pos.Offset))
	if t.initial {
		b = binary.BigEndian.AppendUint64(b, t.selector)
		b = appendString(b, t.afterNamespace)
		b = appendString(b, t.afterName)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, tokenCRC))
	return tokenEncoding.EncodeToString(b)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errMalformedToken = errors.New("not a resume token issued by informerhub")

// decodeToken parses a token. It never panics and reads at most
// maxTokenLength bytes, whatever it is given.
func decodeToken(s string) (*token, error) {
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
	t := &token{initial: body[1]&tokenFlagInitial != 0}
	if body[1]&^tokenFlagInitial != 0 {
		return nil, errMalformedToken
	}
	t.resource = r.string()
	t.pos.Epoch = r.uint64()
	t.pos.Seq = r.uvarint()
	t.pos.RV = r.uvarint()
	offset := r.uvarint()
	if offset > 1<<32-1 {
		r.bad = true
	}
	t.pos.Offset = uint32(offset)
	if t.initial {
		t.selector = r.uint64()
		t.afterNamespace = r.string()
		t.afterName = r.string()
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
type composite struct {
	identities []uint64
	tokens     []string
}

const (
	compositeVersion = 1
	// maxCompositeWatches bounds the watches decodeComposite reads; a
	// transport bounds them further.
	maxCompositeWatches = 256
	// maxCompositeLength bounds what decodeComposite reads.
	maxCompositeLength = maxCompositeWatches * (maxTokenLength + 1)
)

// compositeHeader encodes the header of a composite of these identities.
func compositeHeader(identities []uint64) string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+8*len(identities)+4)
	b = append(b, compositeVersion)
	b = binary.AppendUvarint(b, uint64(len(identities)))
	for _, id := range identities {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, tokenCRC))
	return tokenEncoding.EncodeToString(b)
}

// encodeComposite joins a composite's header and its watches' tokens.
func encodeComposite(header string, tokens []string) string {
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

// decodeComposite parses a composite token. Its watches' tokens are checked
// when they are used. It never panics and reads at most maxCompositeLength
// bytes, whatever it is given.
func decodeComposite(s string) (*composite, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxCompositeLength {
		return nil, errMalformedComposite
	}
	head, rest, ok := strings.Cut(s, ".")
	if !ok {
		if _, err := decodeToken(s); err == nil {
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
	if r.bad || n == 0 || n > maxCompositeWatches || uint64(len(r.b)) != 8*n {
		return nil, errMalformedComposite
	}
	c := &composite{identities: make([]uint64, n), tokens: strings.SplitN(rest, ".", int(n)+1)}
	for i := range c.identities {
		c.identities[i] = r.uint64()
	}
	if uint64(len(c.tokens)) != n || slices.Contains(c.tokens, "") || strings.Contains(c.tokens[n-1], ".") {
		return nil, errMalformedComposite
	}
	return c, nil
}
