package hubclient_test

import (
	"strings"
	"testing"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// The vectors are the hub's own (informerhub/digest), computed outside Go
// with Python's hashlib:
//
//	h = lambda *f: int.from_bytes(hashlib.sha256(b"".join(x.encode() + b"\0" for x in f)).digest()[:16], "big")
func TestDigestMatchesTheSpecification(t *testing.T) {
	digestOf := func(objects ...[4]string) hubclient.Digest {
		var d hubclient.Digest
		for _, o := range objects {
			d.Add(o[0], o[1], o[2], o[3])
		}
		return d
	}
	a, b, d := [4]string{"demo", "a", "u1", "1"}, [4]string{"demo", "b", "u2", "2"}, [4]string{"demo", "d", "u2", "2"}
	for _, tc := range []struct {
		name    string
		objects [][4]string
		want    string
	}{
		{"none", nil, strings.Repeat("0", 32)},
		{"a", [][4]string{a}, "9d3c49e85ad4e083f7e2adddf824b91d"},
		{"b", [][4]string{b}, "07db7b80ee30f5e92fe749f5890a3ba9"},
		{"a and b: a carry out of the low 64 bits", [][4]string{a, b}, "a517c5694905d66d27c9f7d3812ef4c6"},
		{"b and a: order does not matter", [][4]string{b, a}, "a517c5694905d66d27c9f7d3812ef4c6"},
		{"a and d: past 2^128", [][4]string{a, d}, "4a0130372f692246ab57564c9915b0e8"},
	} {
		got := digestOf(tc.objects...)
		if got.String() != tc.want || got.Count() != uint64(len(tc.objects)) {
			t.Errorf("%s: %s of %d, want %s of %d", tc.name, got, got.Count(), tc.want, len(tc.objects))
		}
	}

	// Kept up as events come: a and b, b modified, a deleted.
	s := digestOf(a, b)
	s.Remove(b[0], b[1], b[2], b[3])
	s.Add("demo", "b", "u2", "7")
	s.Remove(a[0], a[1], a[2], a[3])
	if want := digestOf([4]string{"demo", "b", "u2", "7"}); s != want {
		t.Errorf("after the events: %s of %d, want %s of %d", s, s.Count(), want, want.Count())
	}
	s.Remove("demo", "b", "u2", "7")
	if s != (hubclient.Digest{}) {
		t.Errorf("all removed: %s of %d, want the empty set's", s, s.Count())
	}
	if !digestOf(a).Matches(&hubclient.DigestResult{Count: 1, Digest: "9d3c49e85ad4e083f7e2adddf824b91d"}) ||
		digestOf(a).Matches(&hubclient.DigestResult{Count: 2, Digest: "9d3c49e85ad4e083f7e2adddf824b91d"}) {
		t.Error("Matches does not compare both the count and the digest")
	}
}
