package historystore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir(), MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func obj(name string, rv uint64) Object {
	return Object{Namespace: "ns", Name: name, UID: "uid-" + name, ResourceVersion: rv,
		Labels: map[string]string{"app": name}, JSON: fmt.Sprintf(`{"metadata":{"name":%q}}`, name)}
}

// Records, the state they make and the Meta come back as written.
func TestAppendAndRead(t *testing.T) {
	s := open(t)
	a1, a2, b := obj("a", 11), obj("a", 12), obj("b", 13)
	recs := []Record{
		{Seq: 1, Epoch: 7, RV: 11, TokenRV: 11, Type: TypeAdded, Received: 100, Object: a1},
		{Seq: 2, Epoch: 7, RV: 12, TokenRV: 12, Type: TypeModified, Received: 200, Object: a2, Previous: &a1},
		{Seq: 3, Epoch: 7, RV: 20, TokenRV: 12, Offset: 1, Type: TypeAdded, Received: 300, FromRelist: true, Object: b},
		{Seq: 4, Epoch: 7, RV: 20, TokenRV: 20, Type: TypeDeleted, Received: 300, FromRelist: true, Object: a2, Previous: &a2},
	}
	m := Meta{LastSeq: 4, LastRV: 20, FirstSeq: 1, FloorRV: 10, Epochs: []Epoch{{ID: 7, First: 1, Last: 4}}, Relists: []Range{{From: 12, To: 20}}}
	if err := s.Append("configmaps.v1", nil, Write{ResetState: true, State: []Object{obj("z", 10)}, Records: recs, Meta: &m}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read("configmaps.v1", nil, 1, 10, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(recs, got); diff != "" {
		t.Errorf("records (-written +read):\n%s", diff)
	}
	if got, err := s.Read("configmaps.v1", nil, 1, 10, 100, 1); err != nil || len(got) != 1 {
		t.Errorf("Read bounded to 1 byte: %d records, %v; want 1", len(got), err)
	}
	var state []string
	if err := s.State("configmaps.v1", nil, func(o Object) error { state = append(state, o.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b", "z"}, state); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}
	if gotMeta, ok, err := s.Meta("configmaps.v1"); err != nil || !ok || !cmp.Equal(m, gotMeta) {
		t.Errorf("Meta: %+v %v %v, want %+v", gotMeta, ok, err, m)
	}
	if seq, err := s.LastAtOrBefore("configmaps.v1", 1, 4, 19); err != nil || seq != 2 {
		t.Errorf("LastAtOrBefore(19) = %d, %v; want 2", seq, err)
	}
	if seq, err := s.FirstAfter("configmaps.v1", 1, 4, 200); err != nil || seq != 3 {
		t.Errorf("FirstAfter(200) = %d, %v; want 3", seq, err)
	}
	// Deleted records are missing; the rest stay.
	if _, _, err := s.DeleteBefore("configmaps.v1", nil, 3, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read("configmaps.v1", nil, 2, 10, 10, 0); !errors.Is(err, ErrMissing) {
		t.Errorf("reading a deleted record: %v, want ErrMissing", err)
	}
	if got, err := s.Read("configmaps.v1", nil, 3, 10, 10, 0); err != nil || len(got) != 2 {
		t.Errorf("reading after the deletion: %d records, %v", len(got), err)
	}
	// Objects whose newest record goes stay in the state, taken in.
	if _, _, err := s.DeleteBefore("configmaps.v1", nil, 5, m); err != nil {
		t.Fatal(err)
	}
	var after []Object
	if err := s.State("configmaps.v1", nil, func(o Object) error { after = append(after, o); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Object{b, obj("z", 10)}, after); diff != "" {
		t.Errorf("state after its records went (-want +got):\n%s", diff)
	}
	// Another resource type's keys never mix with these.
	if _, ok, _ := s.Meta("configmaps"); ok {
		t.Error("a resource type whose name prefixes another's has its Meta")
	}
	if err := s.Drop("configmaps.v1"); err != nil {
		t.Fatal(err)
	}
	if all, err := s.Resources(); err != nil || len(all) != 0 {
		t.Errorf("after Drop: %v %v", all, err)
	}
}

// A damaged record is refused, never misread.
func TestReadRecordRefusesDamage(t *testing.T) {
	o := obj("a", 1)
	r := Record{Seq: 1, Type: TypeAdded, Object: o, Previous: &o}
	b := appendBody(appendHeader(nil, &r), &r)
	readRecord := func(v []byte) error {
		r, flags, body, err := readHeader(v)
		if err == nil {
			err = readBody(&r, flags, body, true)
		}
		return err
	}
	for i := range len(b) {
		if err := readRecord(b[:i]); err == nil {
			t.Fatalf("a record cut at %d of %d bytes was read", i, len(b))
		}
	}
	if err := readRecord(b); err != nil {
		t.Fatalf("the whole record: %v", err)
	}
	b[0] = recordVersion + 1
	if err := readRecord(b); err == nil {
		t.Fatal("a record of an unknown version was read")
	}
}

// The decoder reads varints as encoding/binary writes them, and refuses
// what binary.Uvarint refuses (short, or past 64 bits), from bytes and
// from a string alike.
func TestDecoderVarints(t *testing.T) {
	values := []uint64{0, 1, 127, 128, 300, 1<<32 - 1, 1 << 63, ^uint64(0)}
	for _, v := range values {
		b := binary.AppendUvarint(nil, v)
		d := decoder[[]byte]{b: append(b, 0xaa)}
		if got := d.uvarint(); got != v || d.bad || len(d.b) != 1 {
			t.Errorf("uvarint %d: got %d (bad %v, %d left)", v, got, d.bad, len(d.b))
		}
		ds := decoder[string]{b: string(b)}
		if got := ds.uvarint(); got != v || ds.bad || len(ds.b) != 0 {
			t.Errorf("uvarint %d from a string: got %d (bad %v)", v, got, ds.bad)
		}
		sv := int64(v)
		d = decoder[[]byte]{b: binary.AppendVarint(nil, sv)}
		if got := d.varint(); got != sv || d.bad {
			t.Errorf("varint %d: got %d (bad %v)", sv, got, d.bad)
		}
	}
	for _, b := range [][]byte{
		{},
		{0x80},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},       // past 64 bits
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, // 11 bytes
	} {
		_, n := binary.Uvarint(b)
		d := decoder[[]byte]{b: b}
		d.uvarint()
		if !d.bad || n > 0 {
			t.Errorf("%x: decoder bad %v, binary.Uvarint n %d", b, d.bad, n)
		}
	}
}

// A record's objects come back as written, each in one allocation of its
// own: the object's strings share its bytes, not the other object's.
func TestReadBodyCopiesEachObjectOnce(t *testing.T) {
	o, p := obj("a", 2), obj("a", 1)
	o.Labels["tier"] = "web"
	r := Record{Seq: 1, Type: TypeModified, Object: o, Previous: &p}
	b := appendBody(appendHeader(nil, &r), &r)
	var got Record
	allocs := testing.AllocsPerRun(100, func() {
		var flags byte
		var body []byte
		var err error
		got, flags, body, err = readHeader(b)
		if err == nil {
			err = readBody(&got, flags, body, true)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	if diff := cmp.Diff(r.Object, got.Object); diff != "" {
		t.Errorf("object (-written +read):\n%s", diff)
	}
	if diff := cmp.Diff(*r.Previous, *got.Previous); diff != "" {
		t.Errorf("previous (-written +read):\n%s", diff)
	}
	// Per object: its bytes and its labels' map (a map of 1-2 entries is
	// one allocation, or two with its buckets); and the Previous pointer.
	if allocs > 7 {
		t.Errorf("%v allocations to read a record of two objects, want at most 7", allocs)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A store claimed by another cluster is emptied: its versions mean nothing
// there.
func TestClaimClusterEmptiesAnotherClustersHistory(t *testing.T) {
	s := open(t)
	if reset, err := s.ClaimCluster("one"); reset || err != nil {
		t.Fatalf("first claim: reset=%v, %v", reset, err)
	}
	if err := s.Append("configmaps.v1", nil, Write{State: []Object{obj("a", 1)}, Meta: &Meta{LastSeq: 0, LastRV: 1, FirstSeq: 1}}); err != nil {
		t.Fatal(err)
	}
	if reset, err := s.ClaimCluster("one"); reset || err != nil {
		t.Fatalf("same cluster: reset=%v, %v", reset, err)
	}
	if all, _ := s.Resources(); len(all) != 1 {
		t.Fatalf("the same cluster's claim dropped its history: %v", all)
	}
	if reset, err := s.ClaimCluster("two"); !reset || err != nil {
		t.Fatalf("another cluster: reset=%v, %v", reset, err)
	}
	n := 0
	if err := s.State("configmaps.v1", nil, func(Object) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("after another cluster's claim: %d objects, %v", n, err)
	}
	if all, _ := s.Resources(); len(all) != 0 {
		t.Fatalf("after another cluster's claim: %v", all)
	}
}

// Reading the state while retention deletes the records it points at
// reads what was there when it began.
func TestStateReadsOneSnapshot(t *testing.T) {
	s := open(t)
	a, b := obj("a", 1), obj("b", 2)
	recs := []Record{
		{Seq: 1, RV: 1, TokenRV: 1, Type: TypeAdded, Object: a},
		{Seq: 2, RV: 2, TokenRV: 2, Type: TypeAdded, Object: b},
		{Seq: 3, RV: 3, TokenRV: 3, Type: TypeAdded, Object: obj("c", 3)},
	}
	m := Meta{LastSeq: 3, LastRV: 3, FirstSeq: 1}
	if err := s.Append("cm", nil, Write{Records: recs, Meta: &m}); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := s.State("cm", nil, func(o Object) error {
		if o.Name == "a" {
			// Retention, between two of the state's reads.
			if _, _, err := s.DeleteBefore("cm", nil, 3, m); err != nil {
				return err
			}
		}
		got = append(got, o.Name)
		return nil
	})
	if err != nil || !cmp.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("State: %v, %v; want a, b, c", got, err)
	}
}
