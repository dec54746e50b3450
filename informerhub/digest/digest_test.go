package digest

import (
	"strconv"
	"strings"
	"testing"
)

// The vectors were computed outside Go, with Python's hashlib:
//
//	h = lambda *f: int.from_bytes(hashlib.sha256(b"".join(x.encode() + b"\0" for x in f)).digest()[:16], "big")
func TestOfMatchesTheSpecification(t *testing.T) {
	for _, tc := range []struct {
		ns, name, uid, rv, want string
	}{
		{"demo", "a", "u1", "1", "9d3c49e85ad4e083f7e2adddf824b91d"},
		{"demo", "b", "u2", "2", "07db7b80ee30f5e92fe749f5890a3ba9"},
	} {
		var s Set
		s.Add(Of(tc.ns, tc.name, tc.uid, tc.rv))
		if got := s.String(); got != tc.want {
			t.Errorf("Of(%q, %q, %q, %q) = %s, want %s", tc.ns, tc.name, tc.uid, tc.rv, got, tc.want)
		}
	}
}

func TestASetsDigestIsTheSumOfItsObjectsModulo2To128(t *testing.T) {
	a, b := Of("demo", "a", "u1", "1"), Of("demo", "b", "u2", "2")
	var ab, ba Set
	ab.Add(a)
	ab.Add(b)
	ba.Add(b)
	ba.Add(a)
	// (a + b) mod 2^128, from Python as above: it carries out of the low
	// 64 bits.
	if got, want := ab.String(), "a517c5694905d66d27c9f7d3812ef4c6"; got != want {
		t.Errorf("digest of {a, b} = %s, want %s", got, want)
	}
	// a + d wraps past 2^128.
	var ad Set
	ad.Add(a)
	ad.Add(Of("demo", "d", "u2", "2"))
	if got, want := ad.String(), "4a0130372f692246ab57564c9915b0e8"; got != want {
		t.Errorf("digest of {a, d} = %s, want %s (mod 2^128)", got, want)
	}
	var merged Set
	merged.Merge(ab)
	merged.Merge(ad)
	merged.Remove(a)
	merged.Remove(a)
	merged.Remove(b)
	if merged.Count() != 1 || merged.String() != "acc4e64ed49441c2b374a86ea0f0f7cb" {
		t.Errorf("merging {a, b} and {a, d}, less a, a and b: %s of %d, want d alone", merged, merged.Count())
	}
	if !ab.Equal(ba) || ab.Count() != 2 {
		t.Errorf("order matters: %v (%d) vs %v (%d)", ab, ab.Count(), ba, ba.Count())
	}
	ab.Remove(b)
	ab.Remove(a)
	if !ab.Equal(Set{}) || ab.String() != strings.Repeat("0", 32) {
		t.Errorf("removing what was added leaves %s, %d objects; want the empty set's zero digest", ab, ab.Count())
	}
	var neg Set
	neg.Remove(a)
	neg.count = 0
	if got, want := neg.String(), "62c3b617a52b1f7c081d522207db46e3"; got != want {
		t.Errorf("-a mod 2^128 = %s, want %s", got, want)
	}
}

func TestOfRVIsOfTheDecimalResourceVersion(t *testing.T) {
	for _, rv := range []uint64{0, 1, 9, 10, 123456789, 1<<64 - 1} {
		if got, want := OfRV("demo", "a", "u1", rv), Of("demo", "a", "u1", strconv.FormatUint(rv, 10)); got != want {
			t.Errorf("OfRV(%d) = %v, want %v", rv, got, want)
		}
	}
}

func TestFieldsCannotRunIntoEachOther(t *testing.T) {
	// A name may hold a NUL byte; the other fields never do, so a name
	// cannot take the place of the fields after it.
	if Of("demo", "a\x00b", "u", "1") == Of("demo", "a", "b", "u") {
		t.Error("a NUL in a name made two different objects hash alike")
	}
	if Of("demo", "ab", "u", "1") == Of("demo", "a", "bu", "1") {
		t.Error("fields ran into each other")
	}
	long := strings.Repeat("x", 1000) // longer than Of's stack buffer
	if Of("demo", long, "u", "1") == Of("demo", long+"y", "u", "1") {
		t.Error("a long name was cut short")
	}
}

func TestParseReadsWhatStringWrote(t *testing.T) {
	var s Set
	s.Add(Of("demo", "a", "u1", "1"))
	got, err := Parse(s.String(), 1)
	if err != nil || !got.Equal(s) {
		t.Fatalf("Parse(%s) = %v, %v; want %v", s, got, err, s)
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("g", 32), strings.Repeat("0", 31), strings.Repeat("0", 33)} {
		if _, err := Parse(bad, 0); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func BenchmarkOfRV(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		OfRV("kube-system", "coredns-7db6d8ff4d-2xk9p", "0d6c6a3e-4c1b-4c5e-9f5e-3d5b2f1e8a7c", 123456789)
	}
}

func BenchmarkOf(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Of("kube-system", "coredns-7db6d8ff4d-2xk9p", "0d6c6a3e-4c1b-4c5e-9f5e-3d5b2f1e8a7c", "123456789")
	}
}
