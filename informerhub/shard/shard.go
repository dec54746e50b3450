package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apiserver/pkg/sharding"
)

// Keys a selector may hash.
const (
	KeyUID       = "object.metadata.uid"
	KeyNamespace = "object.metadata.namespace"
)

// ErrInvalid is what Parse's errors wrap.
var ErrInvalid = errors.New("invalid shard selector")

// Selector is a parsed shard selector: the field it hashes, and the hash
// ranges it selects.
type Selector struct {
	key    string
	ranges []Range
	text   string
}

// Range is the hashes [Start, End) a shardRange selects, on a number line
// one longer than uint64's: End is at most 1<<64, written as EndIsMax.
type Range struct {
	Start    uint64
	End      uint64
	EndIsMax bool // End is 1<<64: every hash from Start on
	Empty    bool // no hash (a bound the API server's comparison puts out of reach)
}

// Parse reads a shard selector as the API server does.
func Parse(expr string) (*Selector, error) {
	parsed, err := sharding.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	reqs := parsed.Requirements()
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: it selects nothing", ErrInvalid)
	}
	s := &Selector{key: reqs[0].Key, text: parsed.String()}
	for _, r := range reqs {
		s.ranges = append(s.ranges, rangeOf(r))
	}
	return s, nil
}

// hashLen is the length of a hash as apimachinery writes it: 0x and 16
// hex digits.
const hashLen = 2 + 16

// rangeOf turns a requirement into numbers, as apisharding.HexLess orders
// a hash against its bounds: by length first, then by digits.
func rangeOf(r apisharding.ShardRangeRequirement) Range {
	var out Range
	switch {
	case len(r.Start) < hashLen: // below every hash: from 0
	case len(r.Start) > hashLen: // above every hash
		out.Empty = true
	default:
		out.Start, _ = strconv.ParseUint(r.Start[2:], 16, 64)
	}
	switch {
	case len(r.End) < hashLen: // below every hash: nothing
		out.Empty = true
	case len(r.End) > hashLen:
		out.EndIsMax = true
	default:
		out.End, _ = strconv.ParseUint(r.End[2:], 16, 64)
		if out.End <= out.Start {
			out.Empty = true
		}
	}
	return out
}

// Key is the field the selector hashes: KeyUID or KeyNamespace.
func (s *Selector) Key() string { return s.key }

// Ranges are the selector's ranges, in its order.
func (s *Selector) Ranges() []Range { return s.ranges }

// String is the selector as the API server writes it back.
func (s *Selector) String() string { return s.text }

// Matches tells whether an object of that uid and namespace ("" for a
// cluster-scoped one) is selected.
func (s *Selector) Matches(uid, namespace string) bool {
	value := uid
	if s.key == KeyNamespace {
		value = namespace
	}
	return s.MatchesHash(Hash(value))
}

// MatchesHash tells whether a hash of the selector's key is selected.
func (s *Selector) MatchesHash(h uint64) bool {
	for _, r := range s.ranges {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// Contains tells whether h is in the range.
func (r Range) Contains(h uint64) bool {
	return !r.Empty && h >= r.Start && (r.EndIsMax || h < r.End)
}

// Hash is the FNV-1a 64-bit hash apimachinery's sharding takes of a field.
func Hash(value string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(value))
	return h.Sum64()
}
