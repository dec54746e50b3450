package digest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"strconv"
)

// Hash is one object's hash: a 128-bit unsigned integer.
type Hash struct{ hi, lo uint64 }

// Of returns the hash of the object with these identifying fields.
func Of(namespace, name, uid, resourceVersion string) Hash {
	var buf [256]byte
	b := buf[:0]
	for _, s := range [...]string{namespace, name, uid, resourceVersion} {
		b = append(b, s...)
		b = append(b, 0)
	}
	return hashOf(b)
}

// OfRV is Of with the resourceVersion as the number it is, written in
// decimal without an allocation: a digest of every object of a large
// state costs one hash each, and no garbage.
func OfRV(namespace, name, uid string, resourceVersion uint64) Hash {
	var buf [256]byte
	b := buf[:0]
	for _, s := range [...]string{namespace, name, uid} {
		b = append(b, s...)
		b = append(b, 0)
	}
	b = strconv.AppendUint(b, resourceVersion, 10)
	return hashOf(append(b, 0))
}

func hashOf(b []byte) Hash {
	sum := sha256.Sum256(b)
	return Hash{hi: binary.BigEndian.Uint64(sum[0:8]), lo: binary.BigEndian.Uint64(sum[8:16])}
}

// Set is the digest of a set of objects, and how many there are. Its zero
// value is the empty set's. It is a value: copy it freely.
type Set struct {
	sum   Hash
	count uint64
}

// Add adds an object's hash.
func (s *Set) Add(h Hash) {
	var carry uint64
	s.sum.lo, carry = bits.Add64(s.sum.lo, h.lo, 0)
	s.sum.hi, _ = bits.Add64(s.sum.hi, h.hi, carry)
	s.count++
}

// Remove removes an object's hash, which must have been added.
func (s *Set) Remove(h Hash) {
	var borrow uint64
	s.sum.lo, borrow = bits.Sub64(s.sum.lo, h.lo, 0)
	s.sum.hi, _ = bits.Sub64(s.sum.hi, h.hi, borrow)
	s.count--
}

// Merge adds every hash of another set.
func (s *Set) Merge(o Set) {
	var carry uint64
	s.sum.lo, carry = bits.Add64(s.sum.lo, o.sum.lo, 0)
	s.sum.hi, _ = bits.Add64(s.sum.hi, o.sum.hi, carry)
	s.count += o.count
}

// Count returns the number of objects in the set.
func (s Set) Count() uint64 { return s.count }

// String returns the digest as 32 lowercase hexadecimal digits.
func (s Set) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], s.sum.hi)
	binary.BigEndian.PutUint64(b[8:16], s.sum.lo)
	return hex.EncodeToString(b[:])
}

// Equal reports whether two sets have the same digest and count.
func (s Set) Equal(o Set) bool { return s == o }

// Parse reads a digest that String wrote, for count objects.
func Parse(digest string, count uint64) (Set, error) {
	if len(digest) != 32 {
		return Set{}, fmt.Errorf("digest %q: want 32 hexadecimal digits", digest)
	}
	b, err := hex.DecodeString(digest)
	if err != nil {
		return Set{}, fmt.Errorf("digest %q: %w", digest, err)
	}
	return Set{sum: Hash{hi: binary.BigEndian.Uint64(b[0:8]), lo: binary.BigEndian.Uint64(b[8:16])}, count: count}, nil
}
