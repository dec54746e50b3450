package historystore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

var secretsGR = schema.GroupResource{Resource: "secrets"}

// key returns a random key of n bytes, base64 as an EncryptionConfiguration
// holds it.
func key(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// transformer loads an EncryptionConfiguration whose one entry, for
// secrets, has providers, with k8s.io/apiserver's loader, and returns its
// transformer for secrets.
func transformer(t *testing.T, providers string) value.Transformer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n" + providers
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	loaded, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "test")
	if err != nil {
		t.Fatalf("%v\n%s", err, config)
	}
	return encryptionconfig.StaticTransformers(loaded.Transformers).TransformerForResource(secretsGR)
}

func aesgcm(name, secret string) string {
	return fmt.Sprintf("  - aesgcm:\n      keys:\n      - name: %s\n        secret: %s\n", name, secret)
}

// markerIn returns an object that holds marker in its JSON, its labels and
// its UID.
func markerIn(name, marker string, rv uint64) Object {
	return Object{Namespace: "ns", Name: name, UID: "uid-" + marker, ResourceVersion: rv,
		Labels: map[string]string{"app": marker}, JSON: fmt.Sprintf(`{"metadata":{"name":%q},"data":{"v":%q}}`, name, marker)}
}

// filesHolding lists the files under dir that hold s.
func filesHolding(t *testing.T, dir string, s []byte) []string {
	t.Helper()
	for {
		var found []string
		vanished := false
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				vanished = true // Pebble compacted it away meanwhile
				return nil
			}
			if bytes.Contains(b, s) {
				found = append(found, filepath.Base(path))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// A file that vanished moved its contents to one the walk may have
		// missed: search again until the files hold still.
		if !vanished {
			return found
		}
	}
}

// No file of the store (write-ahead log, tables, manifests) holds an
// object's JSON, labels or UID when its transformer encrypts, whichever
// provider: before Pebble flushes, after it compacts, and after retention
// took objects into the state (sealed again under their state keys). What
// is read back is what was written. Identity is the control: the same
// search finds the marker there.
func TestEncryptedObjectsAreNowhereInTheFiles(t *testing.T) {
	for _, tt := range []struct {
		name, providers string
		encrypted       bool
	}{
		{"aesgcm", aesgcm("key1", key(t, 32)), true},
		{"aescbc", fmt.Sprintf("  - aescbc:\n      keys:\n      - name: key1\n        secret: %s\n", key(t, 32)), true},
		{"secretbox", fmt.Sprintf("  - secretbox:\n      keys:\n      - name: key1\n        secret: %s\n", key(t, 32)), true},
		{"identity", "  - identity: {}\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := transformer(t, tt.providers)
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir, MemTableBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			marker := []byte(rand.Text())
			a1, a2, z := markerIn("a", string(marker)+"1", 11), markerIn("a", string(marker)+"2", 12), markerIn("z", string(marker)+"z", 10)
			recs := []Record{
				{Seq: 1, Epoch: 7, RV: 11, TokenRV: 11, Type: TypeAdded, Received: 100, Object: a1},
				{Seq: 2, Epoch: 7, RV: 12, TokenRV: 12, Type: TypeModified, Received: 200, Object: a2, Previous: &a1},
			}
			m := Meta{LastSeq: 2, LastRV: 12, FirstSeq: 1, FloorRV: 10}
			if err := s.Append("secrets.v1", tr, Write{ResetState: true, State: []Object{z}, Records: recs, Meta: &m}); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				t.Helper()
				found := filesHolding(t, dir, marker)
				if tt.encrypted && len(found) > 0 {
					t.Errorf("%s: %v hold the marker", when, found)
				}
				if !tt.encrypted && len(found) == 0 {
					t.Errorf("%s: no file holds the marker written as it is: the search finds nothing", when)
				}
				if enc := filesHolding(t, dir, []byte("k8s:enc:"+tt.name+":v1:key1:")); tt.encrypted && len(enc) == 0 {
					t.Errorf("%s: no file holds a value encrypted with %s", when, tt.name)
				}
			}
			check("in the write-ahead log")
			got, err := s.Read("secrets.v1", tr, 1, 3, 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(recs, got); diff != "" {
				t.Errorf("records (-written +read):\n%s", diff)
			}
			if h, err := s.Head("secrets.v1", 2); err != nil || h.RV != 12 || h.Received != 200 || h.Object.JSON != "" {
				t.Errorf("Head: %+v, %v; want the header of record 2 alone", h, err)
			}
			// Retention takes a2 into the state, sealed under its state key.
			if _, _, err := s.DeleteBefore("secrets.v1", tr, 3, m); err != nil {
				t.Fatal(err)
			}
			var state []Object
			if err := s.State("secrets.v1", tr, func(o Object) error { state = append(state, o); return nil }); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Object{a2, z}, state); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if err := s.Settle(context.Background()); err != nil {
				t.Fatal(err)
			}
			check("compacted")
		})
	}
}

// Keys rotate as the API server rotates them: a configuration that writes
// with a new key and still lists the old one reads both; once the old key
// goes, what it encrypted no longer reads, with ErrUndecryptable, as
// without any configuration; identity first, with the keys after it,
// reads everything and writes as it is (a migration away from
// encryption).
func TestKeyRotation(t *testing.T) {
	s := open(t)
	k1, k2 := key(t, 32), key(t, 16)
	write := func(tr value.Transformer, seq uint64) Record {
		t.Helper()
		o := markerIn(fmt.Sprint("o", seq), fmt.Sprint("v", seq), seq)
		r := Record{Seq: seq, RV: seq, TokenRV: seq, Type: TypeAdded, Object: o}
		if err := s.Append("secrets.v1", tr, Write{Records: []Record{r}}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	read := func(tr value.Transformer, seq uint64) error {
		t.Helper()
		_, err := s.Read("secrets.v1", tr, seq, seq+1, 1, 0)
		return err
	}
	old := transformer(t, aesgcm("key1", k1))
	rotated := transformer(t, aesgcm("key2", k2)+aesgcm("key1", k1))
	newOnly := transformer(t, aesgcm("key2", k2))
	away := transformer(t, "  - identity: {}\n"+aesgcm("key2", k2)+aesgcm("key1", k1))
	write(old, 1)
	write(rotated, 2)
	write(away, 3)
	for _, tt := range []struct {
		name string
		tr   value.Transformer
		seq  uint64
		ok   bool
	}{
		{"the old key reads what it wrote", old, 1, true},
		{"the old key does not read the new", old, 2, false},
		{"the rotated configuration reads the old key's", rotated, 1, true},
		{"the rotated configuration reads its own", rotated, 2, true},
		{"the new key alone does not read the old key's", newOnly, 1, false},
		{"the new key alone reads its own", newOnly, 2, true},
		{"no configuration does not read encrypted values", nil, 2, false},
		{"no configuration reads what identity wrote", nil, 3, true},
		{"identity first reads the old key's", away, 1, true},
		{"identity first reads the new key's", away, 2, true},
	} {
		err := read(tt.tr, tt.seq)
		if tt.ok && err != nil || !tt.ok && !errors.Is(err, ErrUndecryptable) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// A value moved to another key (another record, another object of the
// state, another resource type's record) does not read, whichever
// provider: aesgcm authenticates the key, and aescbc and secretbox, which
// authenticate none, find another key inside what they decrypt.
func TestAMovedValueDoesNotRead(t *testing.T) {
	for name, providers := range map[string]string{
		"aesgcm":    aesgcm("key1", key(t, 32)),
		"aescbc":    fmt.Sprintf("  - aescbc:\n      keys:\n      - name: key1\n        secret: %s\n", key(t, 32)),
		"secretbox": fmt.Sprintf("  - secretbox:\n      keys:\n      - name: key1\n        secret: %s\n", key(t, 32)),
	} {
		t.Run(name, func(t *testing.T) {
			tr := transformer(t, providers)
			s := open(t)
			a, b := markerIn("a", "va", 1), markerIn("b", "vb", 2)
			w := Write{Records: []Record{
				{Seq: 1, RV: 1, TokenRV: 1, Type: TypeAdded, Object: a},
				{Seq: 2, RV: 2, TokenRV: 2, Type: TypeAdded, Object: b},
			}}
			for _, resource := range []string{"secrets.v1", "other.v1"} {
				if err := s.Append(resource, tr, w); err != nil {
					t.Fatal(err)
				}
			}
			// State entries of their own (those above point at the records).
			if err := s.Append("state.v1", tr, Write{State: []Object{a, b}}); err != nil {
				t.Fatal(err)
			}
			move := func(from, to []byte) {
				t.Helper()
				v, closer, err := s.db.Get(from)
				if err != nil {
					t.Fatal(err)
				}
				v = bytes.Clone(v)
				closer.Close()
				if err := s.db.Set(to, v, nil); err != nil {
					t.Fatal(err)
				}
			}
			move(recordKey("secrets.v1", 1), recordKey("secrets.v1", 2))
			if _, err := s.Get("secrets.v1", tr, 2); !errors.Is(err, ErrUndecryptable) {
				t.Errorf("a record moved to another seq: %v, want ErrUndecryptable", err)
			}
			move(recordKey("secrets.v1", 1), recordKey("other.v1", 1))
			if _, err := s.Get("other.v1", tr, 1); !errors.Is(err, ErrUndecryptable) {
				t.Errorf("a record moved to another resource type: %v, want ErrUndecryptable", err)
			}
			move(stateKey("state.v1", "ns", "a"), stateKey("state.v1", "ns", "b"))
			err := s.State("state.v1", tr, func(Object) error { return nil })
			if !errors.Is(err, ErrUndecryptable) {
				t.Errorf("a state entry moved to another object: %v, want ErrUndecryptable", err)
			}
		})
	}
}

// A transformer that writes values as they are writes what the store
// wrote before it sealed anything: the header, then the objects, without
// the key.
func TestIdentityWritesAsBefore(t *testing.T) {
	s := open(t)
	o := markerIn("a", "v", 1)
	r := Record{Seq: 1, Epoch: 3, RV: 1, TokenRV: 1, Type: TypeModified, Received: 5, Object: o, Previous: &o}
	for _, tr := range []value.Transformer{nil, transformer(t, "  - identity: {}\n"+aesgcm("key1", key(t, 32)))} {
		if err := s.Append("secrets.v1", tr, Write{State: []Object{o}, Records: []Record{r}}); err != nil {
			t.Fatal(err)
		}
		v, closer, err := s.db.Get(recordKey("secrets.v1", 1))
		if err != nil {
			t.Fatal(err)
		}
		if want := appendBody(appendHeader(nil, &r), &r); !bytes.Equal(v, want) {
			t.Errorf("identity wrote %q, want %q", v, want)
		}
		closer.Close()
	}
}
