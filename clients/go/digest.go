package hubclient

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/bits"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// Digest is the digest of a set of objects, as the hub's Digest computes
// it (the algorithm is DigestResponse.digest's, in the proto): the sum,
// modulo 2^128, of a hash of each object's namespace, name, uid and
// resourceVersion. It does not depend on the order objects are added in,
// so a client keeps it up as it applies events: Add on ADDED, Remove the
// held version and Add the new one on MODIFIED, Remove the held version on
// DELETED. Its zero value is the empty set's. It is a value: copy it
// freely.
//
// The SDK computes it here rather than importing the hub's own, so that
// it needs nothing but the generated API; both are tested against the
// same vectors.
type Digest struct {
	hi, lo uint64
	count  uint64
}

// Add adds an object.
func (d *Digest) Add(namespace, name, uid, resourceVersion string) {
	hi, lo := objectHash(namespace, name, uid, resourceVersion)
	var carry uint64
	d.lo, carry = bits.Add64(d.lo, lo, 0)
	d.hi, _ = bits.Add64(d.hi, hi, carry)
	d.count++
}

// Remove removes an object that was added, with the fields it was added
// with.
func (d *Digest) Remove(namespace, name, uid, resourceVersion string) {
	hi, lo := objectHash(namespace, name, uid, resourceVersion)
	var borrow uint64
	d.lo, borrow = bits.Sub64(d.lo, lo, 0)
	d.hi, _ = bits.Sub64(d.hi, hi, borrow)
	d.count--
}

// AddObject adds a Kubernetes object (typed, or unstructured).
func (d *Digest) AddObject(obj metav1.Object) {
	d.Add(obj.GetNamespace(), obj.GetName(), string(obj.GetUID()), obj.GetResourceVersion())
}

// RemoveObject removes a Kubernetes object that was added: the version
// that was added, not a DELETED event's, which carries the deletion's
// resourceVersion.
func (d *Digest) RemoveObject(obj metav1.Object) {
	d.Remove(obj.GetNamespace(), obj.GetName(), string(obj.GetUID()), obj.GetResourceVersion())
}

// Count is the number of objects in the set.
func (d Digest) Count() uint64 { return d.count }

// String is the digest as the hub writes it: 32 lowercase hexadecimal
// digits.
func (d Digest) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], d.hi)
	binary.BigEndian.PutUint64(b[8:16], d.lo)
	return hex.EncodeToString(b[:])
}

// Matches reports whether the hub's answer describes the same set.
func (d Digest) Matches(r *DigestResult) bool {
	return r != nil && r.Count == d.count && r.Digest == d.String()
}

// objectHash is the first 16 bytes of the SHA-256 of the fields, each
// followed by a zero byte, as a big-endian integer.
func objectHash(namespace, name, uid, resourceVersion string) (hi, lo uint64) {
	var buf [256]byte
	b := buf[:0]
	for _, s := range [...]string{namespace, name, uid, resourceVersion} {
		b = append(b, s...)
		b = append(b, 0)
	}
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[0:8]), binary.BigEndian.Uint64(sum[8:16])
}

// DigestResult is the hub's digest of a selection at one position.
type DigestResult struct {
	// Count is the number of objects the selector selects there.
	Count uint64
	// Digest is their digest; a Digest of the same objects has it as its
	// String.
	Digest string
	// ResourceVersion is the Kubernetes resourceVersion of the position.
	ResourceVersion string
	// ResumeToken: a Watch from it continues exactly after the position.
	ResumeToken string
	// Moved is set when the asked token is older than the hub's history
	// in memory: the digest is then of the current position, all of it.
	Moved bool
}

// Digest asks the hub for the digest of the objects sel selects at the
// position of resumeToken (a token of a Watch or Snapshot of sel; "" for
// now). It tries each replica once on errors a retry can fix.
func (c *Client) Digest(ctx context.Context, sel Selector, resumeToken string) (*DigestResult, error) {
	req := &informerhubv1.DigestRequest{Selector: sel.proto(), ResumeToken: resumeToken}
	return retry(ctx, c, func(svc informerhubv1.InformerHubServiceClient) (*DigestResult, error) {
		resp, err := svc.Digest(ctx, req)
		if err != nil {
			return nil, err
		}
		return &DigestResult{Count: resp.GetCount(), Digest: resp.GetDigest(), ResourceVersion: resp.GetResourceVersion(),
			ResumeToken: resp.GetResumeToken(), Moved: resp.GetMoved()}, nil
	})
}
