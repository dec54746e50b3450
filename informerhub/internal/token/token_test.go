package token

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/informerhub/informerhub/informerhub/internal/state"
)

func TestTokenRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tok  Token
	}{
		{"position", Token{Resource: "configmaps.v1", Pos: state.Position{Epoch: 42, Seq: 7, RV: 1234}}},
		{"inside a relist", Token{Resource: "deployments.v1.apps", Pos: state.Position{Epoch: 1, Seq: 9, RV: 77, Offset: 3}}},
		{"initial events", Token{Resource: "configmaps.v1", Pos: state.Position{Epoch: 3, RV: 5}, Initial: true, Selector: 99,
			AfterNamespace: "default", AfterName: "web-1"}},
		{"initial events, nothing sent yet", Token{Resource: "namespaces.v1", Pos: state.Position{Epoch: 3, RV: 5}, Initial: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.tok.Encode()
			if strings.ContainsAny(s, "+/=") {
				t.Errorf("token %q is not URL-safe", s)
			}
			got, err := Decode(s)
			if err != nil {
				t.Fatalf("decodeToken(%q): %v", s, err)
			}
			if diff := cmp.Diff(&tt.tok, got, cmp.AllowUnexported(Token{}, state.Position{})); diff != "" {
				t.Fatalf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeTokenRejectsDamage(t *testing.T) {
	good := (&Token{Resource: "configmaps.v1", Pos: state.Position{Epoch: 42, Seq: 7, RV: 1234}}).Encode()
	for i := range good {
		// Change each character: the checksum must catch it.
		b := []byte(good)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		if tok, err := Decode(string(b)); err == nil {
			t.Errorf("token with character %d changed decoded as %+v", i, tok)
		}
	}
	for _, bad := range []string{"", "x", good[:len(good)-1], good + "A", strings.Repeat("A", maxTokenLength+1)} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("decodeToken(%q) succeeded", bad)
		}
	}
}

// FuzzDecodeToken checks that no string panics the decoder and that
// whatever decodes encodes back to an equivalent token. The corpus is in
// testdata/fuzz/FuzzDecodeToken.
func FuzzDecodeToken(f *testing.F) {
	f.Add((&Token{Resource: "configmaps.v1", Pos: state.Position{Epoch: 42, Seq: 7, RV: 1234}}).Encode())
	f.Add((&Token{Resource: "x.v1", Pos: state.Position{RV: 1}, Initial: true, AfterNamespace: "a", AfterName: "b"}).Encode())
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		checkTokenRoundTrip(t, s)
	})
}

// FuzzDecodeTokenBody fuzzes what lies behind the checksum, which random
// strings almost never get past: the body is sealed with a valid checksum
// before decoding, so the fuzzer explores the structure (lengths, varints,
// flags). The corpus is in testdata/fuzz/FuzzDecodeTokenBody.
func FuzzDecodeTokenBody(f *testing.F) {
	for _, tok := range []Token{
		{Resource: "configmaps.v1", Pos: state.Position{Epoch: 42, Seq: 7, RV: 1234, Offset: 3}},
		{Resource: "x.v1", Pos: state.Position{RV: 1}, Initial: true, Selector: 9, AfterNamespace: "a", AfterName: "b"},
	} {
		b, err := tokenEncoding.DecodeString(tok.Encode())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:len(b)-4])
	}
	f.Add([]byte{tokenVersion, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) // a huge length
	f.Add([]byte{tokenVersion + 1, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		sealed := binary.BigEndian.AppendUint32(slices.Clone(body), crc32.Checksum(body, tokenCRC))
		checkTokenRoundTrip(t, tokenEncoding.EncodeToString(sealed))
	})
}

// checkTokenRoundTrip decodes s and, if it is a token, checks that its
// encoding decodes to the same token.
func checkTokenRoundTrip(t *testing.T, s string) {
	tok, err := Decode(s)
	if err != nil {
		return
	}
	again, err := Decode(tok.Encode())
	if err != nil {
		t.Fatalf("re-encoded token does not decode: %v", err)
	}
	if diff := cmp.Diff(tok, again, cmp.AllowUnexported(Token{}, state.Position{})); diff != "" {
		t.Fatalf("re-encoded token differs (-first +second):\n%s", diff)
	}
}
